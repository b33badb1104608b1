#pragma once
// A decode engine's received LMCache-mode KV (emulated): one record per (id sequence, rank)
// copy that arrived, checked on arrival, claimed by the decode request whose prompt needs it.
// Bytes are not held: a record keeps the size the copy would occupy, and the bound applies to
// that. Copies nobody claims are dropped after a TTL, and the oldest go first when the bound
// is exceeded, so the inbox never grows without limit. Time is passed in; not thread-safe
// (pdsim runs it on its strand).
#include "net/common/io.hpp"

#include <cstdint>
#include <list>
#include <optional>
#include <string>
#include <unordered_map>

namespace pdr::sim {

struct KvCopy {
    std::uint64_t key = 0;  // hash_ids of the token ids the KV covers
    int rank = 0;
    std::uint32_t tokens = 0;
    std::uint64_t bytes = 0;
    bool corrupt = false;  // its bytes failed verification
    std::string req_id;    // the sender's request id, for messages
};

struct InboxCounters {
    std::uint64_t received = 0;  // copies added, corrupt ones included
    std::uint64_t corrupt = 0;
    std::uint64_t claimed = 0;         // requests that found every rank's KV
    std::uint64_t claim_failures = 0;  // requests that did not
    std::uint64_t expired = 0;         // copies dropped by the TTL
    std::uint64_t evicted = 0;         // copies dropped by the size bound
};

class LmcacheInbox {
public:
    LmcacheInbox(Duration ttl, std::uint64_t max_bytes);

    // Adds one copy (evicting the oldest while more than max_bytes are held).
    void add(KvCopy copy, Clock::time_point now);

    // Takes one good copy per rank 0..ranks-1 of the KV for `key` covering `tokens` tokens;
    // takes nothing unless every rank has one. On failure returns the reason, naming the first
    // rank without a good copy (e.g. "lmcache: KV for this prompt not received on rank 1").
    std::optional<std::string> claim(std::uint64_t key, std::uint32_t tokens, int ranks);

    // Drops copies older than the TTL; returns how many.
    std::size_t expire(Clock::time_point now);
    std::optional<Clock::time_point> next_expiry() const;

    std::size_t copies_held() const noexcept { return order_.size(); }
    std::uint64_t bytes_held() const noexcept { return bytes_held_; }
    std::uint64_t max_bytes() const noexcept { return max_bytes_; }
    const InboxCounters& counters() const noexcept { return counters_; }
    // Drops every copy and zeroes the counters (debug reset).
    void reset();

private:
    struct Entry {
        KvCopy copy;
        Clock::time_point arrived;
    };
    using Order = std::list<Entry>;
    void erase(Order::iterator it);

    Duration ttl_;
    std::uint64_t max_bytes_;
    std::uint64_t bytes_held_ = 0;
    Order order_;  // oldest first
    std::unordered_multimap<std::uint64_t, Order::iterator> by_key_;
    InboxCounters counters_;
};

}  // namespace pdr::sim
