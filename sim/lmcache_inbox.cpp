#include "sim/lmcache_inbox.hpp"

#include <vector>

namespace pdr::sim {

LmcacheInbox::LmcacheInbox(Duration ttl, std::uint64_t max_bytes)
    : ttl_(ttl), max_bytes_(max_bytes) {}

void LmcacheInbox::add(KvCopy copy, Clock::time_point now) {
    ++counters_.received;
    if (copy.corrupt) {
        ++counters_.corrupt;
    }
    bytes_held_ += copy.bytes;
    const std::uint64_t key = copy.key;
    order_.push_back(Entry{std::move(copy), now});
    by_key_.emplace(key, std::prev(order_.end()));
    while (bytes_held_ > max_bytes_ && !order_.empty()) {
        ++counters_.evicted;
        erase(order_.begin());
    }
}

std::optional<std::string> LmcacheInbox::claim(std::uint64_t key, std::uint32_t tokens, int ranks) {
    auto [first, last] = by_key_.equal_range(key);
    std::vector<std::optional<Order::iterator>> good(static_cast<std::size_t>(ranks));
    std::vector<bool> corrupt(static_cast<std::size_t>(ranks), false);
    std::vector<bool> wrong_length(static_cast<std::size_t>(ranks), false);
    for (auto it = first; it != last; ++it) {
        const KvCopy& c = it->second->copy;
        if (c.rank < 0 || c.rank >= ranks) {
            continue;
        }
        const auto r = static_cast<std::size_t>(c.rank);
        if (c.corrupt) {
            corrupt[r] = true;
        } else if (c.tokens != tokens) {
            wrong_length[r] = true;
        } else if (!good[r] || (*good[r])->arrived > it->second->arrived) {
            good[r] = it->second;  // the oldest good copy
        }
    }
    for (std::size_t r = 0; r < good.size(); ++r) {
        if (good[r]) {
            continue;
        }
        ++counters_.claim_failures;
        const std::string rank = std::to_string(r);
        if (corrupt[r]) {
            return "lmcache: KV for this prompt received on rank " + rank + " failed verification";
        }
        if (wrong_length[r]) {
            return "lmcache: KV received on rank " + rank + " does not cover this prompt's " +
                   std::to_string(tokens) + " tokens";
        }
        return "lmcache: KV for this prompt not received on rank " + rank;
    }
    for (auto& g : good) {
        erase(*g);
    }
    ++counters_.claimed;
    return std::nullopt;
}

std::size_t LmcacheInbox::expire(Clock::time_point now) {
    std::size_t n = 0;
    while (!order_.empty() && order_.front().arrived + ttl_ <= now) {
        erase(order_.begin());
        ++n;
    }
    counters_.expired += n;
    return n;
}

std::optional<Clock::time_point> LmcacheInbox::next_expiry() const {
    if (order_.empty()) {
        return std::nullopt;
    }
    return order_.front().arrived + ttl_;
}

void LmcacheInbox::reset() {
    order_.clear();
    by_key_.clear();
    bytes_held_ = 0;
    counters_ = InboxCounters{};
}

void LmcacheInbox::erase(Order::iterator it) {
    auto [first, last] = by_key_.equal_range(it->copy.key);
    for (auto k = first; k != last; ++k) {
        if (k->second == it) {
            by_key_.erase(k);
            break;
        }
    }
    bytes_held_ -= it->copy.bytes;
    order_.erase(it);
}

}  // namespace pdr::sim
