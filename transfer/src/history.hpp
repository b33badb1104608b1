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

    void add(TransferHandle handle, const TransferResult& result);
    // The kept result of `handle`, or nullptr if it never finished or was pushed out.
    const TransferResult* find(TransferHandle handle) const;

    std::size_t size() const noexcept { return ring_.size(); }
    std::size_t overflow_size() const noexcept { return overflow_.size(); }

private:
    struct Entry {
        TransferHandle handle = kNoTransfer;
        TransferResult result;
    };
    // Add numbers count from 1 (0 marks an empty index slot); number n lives at ring_[(n-1) % cap].
    bool kept(std::uint64_t n) const noexcept { return n != 0 && n + capacity_ > added_; }
    const Entry& entry(std::uint64_t n) const noexcept { return ring_[(n - 1) % capacity_]; }
    void place(TransferHandle handle, std::uint64_t n);
    void reindex(std::uint64_t slots);

    std::uint64_t capacity_;
    std::uint64_t max_slots_;
    std::uint64_t added_ = 0;
    std::vector<Entry> ring_;           // grows to capacity_, then wraps
    std::vector<std::uint64_t> index_;  // handle & mask_ -> add number
    std::uint64_t mask_ = 0;
    std::unordered_map<TransferHandle, std::uint64_t> overflow_;  // handle -> add number
};

}  // namespace pdx::detail
