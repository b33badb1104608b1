#pragma once
// The results of the newest `capacity` transfers to reach a terminal state, for poll() and
// result(). Not thread-safe (the agent locks).
//
// A ring in completion order plus an index by handle: handles are issued in sequence, so
// `handle & mask` spreads them over a direct-mapped array of add numbers (at least twice as many
// slots as kept results; it doubles as the ring grows, up to twice the capacity). add() and
// find() cost no hashing and no allocation once the ring is full; the node-based map this
// replaces cost a hash lookup and two cold nodes per transfer. Two kept handles share an index
// slot only when one finished at least index-size handles after the other was issued; the
// older one then moves to a small overflow map, so nothing kept is lost.
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "pdx/types.hpp"

namespace pdx::detail {

class History {
public:
    explicit History(std::size_t capacity);  // clamped to [1, 2^40]

    // Returns the handle this pushed out of the history (kNoTransfer if none).
    TransferHandle add(TransferHandle handle, const TransferResult& result);
    // The kept result of `handle`, or nullptr if it never finished or was pushed out.
    const TransferResult* find(TransferHandle handle) const;

    std::size_t size() const noexcept { return ring_.size(); }
    std::size_t capacity() const noexcept { return capacity_; }
    std::size_t overflow_size() const noexcept { return overflow_.size(); }

private:
    struct Entry {
        TransferHandle handle = kNoTransfer;
        TransferResult result;
    };
    // Index slots and overflow values hold ring positions + 1 (0: an empty slot). A slot is live
    // while the entry at its position still carries a handle of the slot's key: a position that
    // was overwritten since carries another key, and handles are never reused. No division on
    // any path (add, find): the ring position advances by one and wraps by comparison.
    bool owns(std::uint64_t slot, std::uint64_t key) const noexcept {
        return slot != 0 && (ring_[slot - 1].handle & mask_) == key;
    }
    void place(TransferHandle handle, std::uint64_t pos);
    void reindex(std::uint64_t slots);

    std::uint64_t capacity_;
    std::uint64_t max_slots_;
    std::uint64_t next_ = 0;            // the ring position the next add writes
    std::vector<Entry> ring_;           // grows to capacity_, then wraps
    std::vector<std::uint64_t> index_;  // handle & mask_ -> ring position + 1
    std::uint64_t mask_ = 0;
    std::unordered_map<TransferHandle, std::uint64_t> overflow_;  // handle -> position + 1
};

}  // namespace pdx::detail
