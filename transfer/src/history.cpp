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

void History::add(TransferHandle handle, const TransferResult& result) {
    const std::uint64_t n = ++added_;
    if (ring_.size() < capacity_) {
        ring_.push_back({handle, result});
        if (ring_.size() * 2 > index_.size() && index_.size() < max_slots_) {
            reindex(index_.size() * 2);  // places this one too
            return;
        }
    } else {
        Entry& e = ring_[(n - 1) % capacity_];  // the oldest kept result: pushed out
        if (!overflow_.empty())
            overflow_.erase(e.handle);
        e.handle = handle;
        e.result = result;  // reuses the message's storage
    }
    place(handle, n);
}

void History::place(TransferHandle handle, std::uint64_t n) {
    std::uint64_t& slot = index_[handle & mask_];
    if (kept(slot) && entry(slot).handle != handle)
        overflow_[entry(slot).handle] = slot;  // still kept: keep it findable
    slot = n;
}

void History::reindex(std::uint64_t slots) {
    index_.assign(slots, 0);
    mask_ = slots - 1;
    overflow_.clear();
    for (std::uint64_t n = added_ - ring_.size() + 1; n <= added_; ++n)  // oldest first
        place(entry(n).handle, n);
}

const TransferResult* History::find(TransferHandle handle) const {
    std::uint64_t n = index_[handle & mask_];
    if (!kept(n) || entry(n).handle != handle) {
        if (overflow_.empty())
            return nullptr;
        auto it = overflow_.find(handle);
        if (it == overflow_.end())
            return nullptr;
        n = it->second;
        if (!kept(n) || entry(n).handle != handle)
            return nullptr;
    }
    return &entry(n).result;
}

}  // namespace pdx::detail
