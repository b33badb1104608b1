#pragma once
// KvReadyTable (PROTOCOLS.md §5, step 3): which LMCache "KV ready" notifications arrived for
// which request, without I/O. Time is passed in; it must not go backwards (a smaller `now` is
// taken as the largest seen so far).
//
// One entry per req_id, in one of four states:
//   Orphan      notifications arrived, nobody expects the id (yet): kept until the TTL
//   Registered  expect() was called (before P got the request); nobody waits yet
//   Waiting     the registration's wait began (after P's answer)
//   Tombstone   the registration was released: kept until the TTL so late duplicates are known
// A notification for an id is, by its entry's state:
//   none → Unknown (creates an Orphan) · Orphan → Unknown · Registered → Early ·
//   Waiting → Matched · Tombstone → Duplicate; and Duplicate whenever a registration already
//   has `expected` of them. expect() claims an Orphan's count (those stay counted as Unknown).
// Unclaimed entries (Orphan, Tombstone) leave on sweep() once `ttl` old (an orphan from its
// first notification, a tombstone from its release), or, when the table holds `max_pending`
// entries and needs one more, oldest first. A table full of live registrations drops the new
// orphan and refuses expect(). Every eviction is counted by reason. All operations are O(1)
// but sweep() (O(evicted)) and wakers() (O(size)).
#include <cstddef>
#include <cstdint>
#include <functional>
#include <list>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "net/common/io.hpp"

namespace pdr::kv {

// What a waiting registration leaves in its entry to be woken by (defined by the listener; the
// table only stores and returns it).
struct KvReadyWaker;

class KvReadyTable {
public:
    static constexpr std::size_t kMaxIdBytes = 256;  // longer req_ids are malformed

    enum class State { Orphan, Registered, Waiting, Tombstone };
    enum class Outcome { Matched, Early, Duplicate, Unknown };
    enum class Expect { Ok, Full, InUse, BadId };

    struct Options {
        Duration ttl{30'000};
        std::size_t max_pending = 65'536;
    };
    struct Arrival {
        Outcome outcome = Outcome::Unknown;
        // This notification completed a waiting registration that left a waker: wake it.
        KvReadyWaker* wake = nullptr;
        bool completed = false;  // this notification made a Registered/Waiting entry ready
    };
    struct Evictions {
        std::uint64_t ttl = 0, capacity = 0;
    };

    explicit KvReadyTable(Options o);
    KvReadyTable(const KvReadyTable&) = delete;
    KvReadyTable& operator=(const KvReadyTable&) = delete;

    // Registers `id` (waiting for `expected` notifications, at least 1). Claims an Orphan's
    // count; replaces a Tombstone (count 0). InUse: a live registration has the id. Full: every
    // entry is a live registration. BadId: empty or longer than kMaxIdBytes.
    Expect expect(std::string_view id, std::size_t expected, Clock::time_point now);
    // One notification for `id` (already validated: 1..kMaxIdBytes bytes).
    Arrival arrive(std::string_view id, Clock::time_point now);
    // The registration's wait begins: Registered → Waiting. No-op in other states.
    void start_wait(std::string_view id);
    // Sets (or clears, with nullptr) a registered entry's waker.
    void set_waker(std::string_view id, KvReadyWaker* waker);
    // The registration is over: its entry becomes a Tombstone. No-op unless registered.
    void release(std::string_view id, Clock::time_point now);
    // Evicts unclaimed entries at least `ttl` old; returns how many.
    std::size_t sweep(Clock::time_point now);

    std::optional<State> state(std::string_view id) const;
    std::size_t received(std::string_view id) const;  // notifications counted for the id
    bool ready(std::string_view id) const;            // registered and received ≥ expected
    std::size_t size() const noexcept { return entries_.size(); }
    std::size_t unclaimed() const noexcept { return unclaimed_.size(); }
    const Evictions& evictions() const noexcept { return evictions_; }
    // The waker set for `id` now, or null.
    KvReadyWaker* waker(std::string_view id) const;
    // The wakers set now (to wake every waiter at shutdown).
    std::vector<KvReadyWaker*> wakers() const;

private:
    struct Entry;
    using Node = std::pair<const std::string, Entry>;
    struct Entry {
        State state = State::Orphan;
        std::size_t received = 0;
        std::size_t expected = 0;  // 0 while unclaimed
        Clock::time_point since;   // first notification (Orphan) or release (Tombstone)
        KvReadyWaker* waker = nullptr;
        std::list<Node*>::iterator in_unclaimed;  // valid while unclaimed
    };
    struct IdHash {
        using is_transparent = void;
        std::size_t operator()(std::string_view id) const noexcept {
            return std::hash<std::string_view>{}(id);
        }
    };
    using Map = std::unordered_map<std::string, Entry, IdHash, std::equal_to<>>;

    Clock::time_point clamp(Clock::time_point now) noexcept;
    Entry* find(std::string_view id);
    const Entry* find(std::string_view id) const;
    // Frees a slot if the table is full, evicting the oldest unclaimed entry; false when every
    // entry is a live registration.
    bool make_room();
    void to_unclaimed(Node& node, State s, Clock::time_point now);
    void claim(Entry& e);
    void evict_front(std::uint64_t& counter);

    Options opts_;
    Map entries_;
    // Unclaimed entries, oldest first (`since` never decreases along the list). Nodes of an
    // unordered_map keep their address until erased.
    std::list<Node*> unclaimed_;
    Evictions evictions_;
    Clock::time_point last_now_{};
};

}  // namespace pdr::kv
