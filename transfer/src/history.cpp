#include "history.hpp"

#include <algorithm>
#include <bit>

namespace pdx::detail {

namespace {
constexpr std::uint64_t kMaxCapacity = std::uint64_t(1) << 40;  // keeps 2 * capacity in range
constexpr std::uint64_t kFirstIndexSlots = 1024;
}  // namespace

History::History(std::size_t capacity)
    : capacity_(std::clamp<std::uint64_t>(capacity, 1, kMaxCapacity)),
      max_slots_(std::bit_ceil(capacity_ * 2)) {
    index_.assign(std::min(kFirstIndexSlots, max_slots_), 0);
    mask_ = index_.size() - 1;
}

TransferHandle History::add(TransferHandle handle, const TransferResult& result) {
    const std::uint64_t pos = next_;
    next_ = pos + 1 == capacity_ ? 0 : pos + 1;
    TransferHandle out = kNoTransfer;
    if (ring_.size() < capacity_) {
        ring_.push_back({handle, result});
        if (ring_.size() * 2 > index_.size() && index_.size() < max_slots_) {
            reindex(index_.size() * 2);  // places this one too
            return out;
        }
    } else {
        Entry& e = ring_[pos];  // the oldest kept result: pushed out
        out = e.handle;
        if (!overflow_.empty()) {
            overflow_.erase(e.handle);
        }
        e.handle = handle;
        e.result = result;  // reuses the message's storage
    }
    place(handle, pos);
    return out;
}

void History::place(TransferHandle handle, std::uint64_t pos) {
    const std::uint64_t key = handle & mask_;
    std::uint64_t& slot = index_[key];
    if (owns(slot, key) && slot != pos + 1) {
        overflow_[ring_[slot - 1].handle] = slot;  // still kept: keep it findable
    }
    slot = pos + 1;
}

void History::reindex(std::uint64_t slots) {
    index_.assign(slots, 0);
    mask_ = slots - 1;
    overflow_.clear();
    const std::uint64_t n = ring_.size();
    const std::uint64_t oldest = n < capacity_ ? 0 : next_;
    for (std::uint64_t i = 0, pos = oldest; i < n; ++i, pos = pos + 1 == n ? 0 : pos + 1) {
        place(ring_[pos].handle, pos);
    }
}

const TransferResult* History::find(TransferHandle handle) const {
    std::uint64_t slot = index_[handle & mask_];
    if (slot == 0 || ring_[slot - 1].handle != handle) {
        if (overflow_.empty()) {
            return nullptr;
        }
        auto it = overflow_.find(handle);
        if (it == overflow_.end()) {
            return nullptr;
        }
        slot = it->second;
        if (ring_[slot - 1].handle != handle) {
            return nullptr;
        }
    }
    return &ring_[slot - 1].result;
}

}  // namespace pdx::detail
