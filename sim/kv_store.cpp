#include "sim/kv_store.hpp"

#include "sim/generation.hpp"

#include <algorithm>
#include <cstdio>

namespace pdr::sim {

std::string block_checksum(std::string_view engine_id, const std::vector<std::int64_t>& block_ids,
                           std::size_t block_bytes) {
    const std::uint64_t seed = fnv1a64(engine_id);
    std::uint64_t h = 0xcbf29ce484222325ULL;
    for (std::int64_t id : block_ids) {
        const std::uint64_t block_seed = mix64(seed ^ mix64(static_cast<std::uint64_t>(id)));
        std::uint64_t word = 0;
        for (std::size_t j = 0; j < block_bytes; ++j) {
            if (j % 8 == 0) {
                word = mix64(block_seed + j / 8);
            }
            h ^= static_cast<unsigned char>(word >> ((j % 8) * 8));
            h *= 0x100000001b3ULL;
        }
    }
    char buf[17];
    std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
    return buf;
}

BlockStore::BlockStore(std::string engine_id, std::size_t block_bytes, std::size_t capacity)
    : engine_id_(std::move(engine_id)), block_bytes_(block_bytes), capacity_(capacity) {
    for (std::size_t i = 0; i < capacity_; ++i) {
        free_.push_back(static_cast<std::uint32_t>(i));
    }
}

std::vector<std::int64_t> BlockStore::hold(const std::string& request_id, int n,
                                           Clock::time_point expiry) {
    if (auto it = held_.find(request_id); it != held_.end()) {
        erase(it);
        ++counters_.freed_by_abort;
    }
    auto ids = take(static_cast<std::size_t>(std::max(n, 0)));
    if (!ids) {
        return {};
    }
    Held h;
    h.expiry = expiry;
    h.block_ids.assign(ids->begin(), ids->end());
    blocks_held_ += h.block_ids.size();
    auto out = h.block_ids;
    held_.emplace(request_id, std::move(h));
    return out;
}

const std::vector<std::int64_t>* BlockStore::blocks_of(const std::string& request_id) const {
    auto it = held_.find(request_id);
    return it == held_.end() ? nullptr : &it->second.block_ids;
}

std::optional<std::vector<std::uint32_t>> BlockStore::take(std::size_t n) {
    if (n > free_.size()) {
        ++counters_.pool_exhausted;
        return std::nullopt;
    }
    std::vector<std::uint32_t> ids(free_.begin(), free_.begin() + static_cast<std::ptrdiff_t>(n));
    free_.erase(free_.begin(), free_.begin() + static_cast<std::ptrdiff_t>(n));
    return ids;
}

void BlockStore::give(std::span<const std::uint32_t> ids) {
    for (std::uint32_t id : ids) {
        put_back(id);
    }
}

void BlockStore::put_back(std::uint32_t id) {
    if (free_hook_) {
        free_hook_(id);
    }
    free_.push_back(id);
}

bool BlockStore::release_consumed(const std::string& request_id) {
    auto it = held_.find(request_id);
    if (it == held_.end()) {
        return false;
    }
    erase(it);
    ++counters_.freed_by_read;
    return true;
}

BlockStore::ReadResult BlockStore::read(const std::string& request_id,
                                        const std::vector<std::int64_t>& block_ids) {
    ReadResult r;
    auto it = held_.find(request_id);
    if (it == held_.end()) {
        r.status = ReadStatus::NotHeld;
        return r;
    }
    const auto& held_ids = it->second.block_ids;
    for (std::int64_t id : block_ids) {
        if (std::find(held_ids.begin(), held_ids.end(), id) == held_ids.end()) {
            r.status = ReadStatus::BlockMismatch;
            return r;
        }
    }
    const auto& ids = block_ids.empty() ? held_ids : block_ids;
    r.status = ReadStatus::Ok;
    r.blocks = ids.size();
    r.bytes = ids.size() * block_bytes_;
    r.checksum = block_checksum(engine_id_, ids, block_bytes_);
    erase(it);
    ++counters_.freed_by_read;
    return r;
}

bool BlockStore::release(const std::string& request_id) {
    auto it = held_.find(request_id);
    if (it == held_.end()) {
        return false;
    }
    erase(it);
    ++counters_.freed_by_abort;
    return true;
}

bool BlockStore::refresh(const std::string& request_id, Clock::time_point expiry) {
    auto it = held_.find(request_id);
    if (it == held_.end()) {
        return false;
    }
    it->second.expiry = expiry;
    return true;
}

std::size_t BlockStore::expire(Clock::time_point now) {
    std::size_t n = 0;
    for (auto it = held_.begin(); it != held_.end();) {
        auto next = std::next(it);
        if (it->second.expiry <= now) {
            erase(it);
            ++counters_.freed_by_expiry;
            ++n;
        }
        it = next;
    }
    return n;
}

std::optional<Clock::time_point> BlockStore::next_expiry() const {
    std::optional<Clock::time_point> best;
    for (const auto& [id, h] : held_) {
        if (!best || h.expiry < *best) {
            best = h.expiry;
        }
    }
    return best;
}

void BlockStore::reset() {
    while (!held_.empty()) {
        erase(held_.begin());
    }
    counters_ = FreeCounters{};
}

void BlockStore::erase(std::unordered_map<std::string, Held>::iterator it) {
    blocks_held_ -= it->second.block_ids.size();
    for (std::int64_t id : it->second.block_ids) {
        put_back(static_cast<std::uint32_t>(id));
    }
    held_.erase(it);
}

}  // namespace pdr::sim
