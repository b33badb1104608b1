// KvReadyTable: a few cases spelled out, then random interleavings (seeded) of expect / arrive /
// start-wait / release / sweep / time against a reference model written as plainly as possible:
// a std::map and linear scans. Outcomes, readiness, counts, states, sizes and evictions are
// compared after every step.
#include <gtest/gtest.h>

#include <array>
#include <cstddef>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "router/kv/kv_ready_table.hpp"

namespace pdr::kv {
namespace {

using State = KvReadyTable::State;
using Outcome = KvReadyTable::Outcome;
using Expect = KvReadyTable::Expect;
using ms = std::chrono::milliseconds;

const Clock::time_point kT0 = Clock::time_point{} + std::chrono::hours(1);

// Distinct addresses for the table to hand back; never dereferenced.
std::array<std::byte, 64> waker_storage;
KvReadyWaker* fake_waker(std::size_t i) {
    return reinterpret_cast<KvReadyWaker*>(&waker_storage[i % waker_storage.size()]);
}

TEST(KvReadyTable, ReadyAfterExactlyExpectedNotifications) {
    KvReadyTable t({ms{1000}, 16});
    ASSERT_EQ(t.expect("a", 2, kT0), Expect::Ok);
    t.start_wait("a");
    t.set_waker("a", fake_waker(1));
    auto first = t.arrive("a", kT0);
    EXPECT_EQ(first.outcome, Outcome::Matched);
    EXPECT_FALSE(first.completed);
    EXPECT_EQ(first.wake, nullptr);
    EXPECT_FALSE(t.ready("a"));
    auto second = t.arrive("a", kT0);
    EXPECT_EQ(second.outcome, Outcome::Matched);
    EXPECT_TRUE(second.completed);
    EXPECT_EQ(second.wake, fake_waker(1));
    EXPECT_TRUE(t.ready("a"));
    EXPECT_EQ(t.arrive("a", kT0).outcome, Outcome::Duplicate);
    EXPECT_EQ(t.received("a"), 2u);
}

TEST(KvReadyTable, EarlyNotificationsAreKeptForTheWait) {
    KvReadyTable t({ms{1000}, 16});
    ASSERT_EQ(t.expect("a", 1, kT0), Expect::Ok);
    auto a = t.arrive("a", kT0);
    EXPECT_EQ(a.outcome, Outcome::Early);
    EXPECT_TRUE(a.completed);
    EXPECT_EQ(a.wake, nullptr);
    t.start_wait("a");
    EXPECT_TRUE(t.ready("a"));
    EXPECT_EQ(t.state("a"), State::Waiting);
}

TEST(KvReadyTable, ExpectClaimsAnOrphanAndItsCount) {
    KvReadyTable t({ms{1000}, 16});
    EXPECT_EQ(t.arrive("a", kT0).outcome, Outcome::Unknown);
    EXPECT_EQ(t.state("a"), State::Orphan);
    EXPECT_EQ(t.unclaimed(), 1u);
    ASSERT_EQ(t.expect("a", 2, kT0 + ms{10}), Expect::Ok);
    EXPECT_EQ(t.unclaimed(), 0u);
    EXPECT_EQ(t.received("a"), 1u);
    EXPECT_FALSE(t.ready("a"));
    EXPECT_EQ(t.arrive("a", kT0).outcome, Outcome::Early);
    EXPECT_TRUE(t.ready("a"));
    // A claimed entry is not swept, however old.
    EXPECT_EQ(t.sweep(kT0 + ms{5000}), 0u);
    EXPECT_EQ(t.size(), 1u);
}

TEST(KvReadyTable, TombstoneRecognisesLateDuplicatesUntilTheTtl) {
    KvReadyTable t({ms{100}, 16});
    ASSERT_EQ(t.expect("a", 1, kT0), Expect::Ok);
    t.start_wait("a");
    EXPECT_EQ(t.arrive("a", kT0).outcome, Outcome::Matched);
    t.release("a", kT0 + ms{50});
    EXPECT_EQ(t.state("a"), State::Tombstone);
    EXPECT_EQ(t.arrive("a", kT0 + ms{60}).outcome, Outcome::Duplicate);
    EXPECT_EQ(t.sweep(kT0 + ms{149}), 0u);  // the TTL runs from the release
    EXPECT_EQ(t.sweep(kT0 + ms{150}), 1u);
    EXPECT_EQ(t.evictions().ttl, 1u);
    EXPECT_EQ(t.arrive("a", kT0 + ms{160}).outcome, Outcome::Unknown);
}

TEST(KvReadyTable, CapacityEvictsTheOldestUnclaimedThenRefuses) {
    KvReadyTable t({ms{1000}, 3});
    t.arrive("o1", kT0);
    t.arrive("o2", kT0 + ms{1});
    ASSERT_EQ(t.expect("r1", 1, kT0 + ms{2}), Expect::Ok);
    ASSERT_EQ(t.expect("r2", 1, kT0 + ms{3}), Expect::Ok);  // o1 goes
    EXPECT_FALSE(t.state("o1").has_value());
    EXPECT_EQ(t.state("o2"), State::Orphan);
    EXPECT_EQ(t.evictions().capacity, 1u);
    ASSERT_EQ(t.expect("r3", 1, kT0 + ms{4}), Expect::Ok);  // o2 goes
    EXPECT_EQ(t.evictions().capacity, 2u);
    EXPECT_EQ(t.expect("r4", 1, kT0 + ms{5}), Expect::Full);
    EXPECT_EQ(t.arrive("o3", kT0 + ms{5}).outcome, Outcome::Unknown);  // dropped
    EXPECT_FALSE(t.state("o3").has_value());
    EXPECT_EQ(t.evictions().capacity, 3u);
    EXPECT_EQ(t.size(), 3u);
    t.release("r1", kT0 + ms{6});
    ASSERT_EQ(t.expect("r4", 1, kT0 + ms{7}), Expect::Ok);  // r1's tombstone goes
    EXPECT_FALSE(t.state("r1").has_value());
}

TEST(KvReadyTable, RefusesBadAndBusyIds) {
    KvReadyTable t({ms{1000}, 4});
    EXPECT_EQ(t.expect("", 1, kT0), Expect::BadId);
    EXPECT_EQ(t.expect(std::string(KvReadyTable::kMaxIdBytes + 1, 'x'), 1, kT0), Expect::BadId);
    EXPECT_EQ(t.expect(std::string(KvReadyTable::kMaxIdBytes, 'x'), 1, kT0), Expect::Ok);
    EXPECT_EQ(t.expect("a", 0, kT0), Expect::Ok);  // 0 counts as 1
    EXPECT_EQ(t.expect("a", 1, kT0), Expect::InUse);
    EXPECT_EQ(t.arrive("a", kT0).outcome, Outcome::Early);
    EXPECT_TRUE(t.ready("a"));
    t.release("a", kT0);
    EXPECT_EQ(t.expect("a", 1, kT0), Expect::Ok);  // a tombstone is replaced, count 0
    EXPECT_EQ(t.received("a"), 0u);
}

TEST(KvReadyTable, TimeNeverGoesBackwards) {
    KvReadyTable t({ms{100}, 4});
    t.arrive("a", kT0 + ms{100});
    t.arrive("b", kT0);  // taken as kT0 + 100 ms
    EXPECT_EQ(t.sweep(kT0 + ms{199}), 0u);
    EXPECT_EQ(t.sweep(kT0 + ms{200}), 2u);
}

// ---- reference model ------------------------------------------------------------------------

class Model {
public:
    Model(long ttl, std::size_t cap) : ttl_(ttl), cap_(cap) {}

    struct E {
        State state;
        std::size_t received = 0, expected = 0;
        long since = 0;
        std::uint64_t order = 0;  // when it became unclaimed
        KvReadyWaker* waker = nullptr;
    };
    struct Arrival {
        Outcome outcome;
        bool completed = false;
        KvReadyWaker* wake = nullptr;
    };

    Expect expect(const std::string& id, std::size_t n) {
        n = std::max<std::size_t>(n, 1);
        auto it = m_.find(id);
        if (it != m_.end()) {
            E& e = it->second;
            if (e.state == State::Registered || e.state == State::Waiting) {
                return Expect::InUse;
            }
            if (e.state == State::Tombstone) {
                e.received = 0;
            }
            e.state = State::Registered;
            e.expected = n;
            e.waker = nullptr;
            return Expect::Ok;
        }
        if (!room()) {
            return Expect::Full;
        }
        m_[id] = E{State::Registered, 0, n};
        return Expect::Ok;
    }

    Arrival arrive(const std::string& id) {
        auto it = m_.find(id);
        if (it == m_.end()) {
            if (!room()) {
                ++capacity_;
                return {Outcome::Unknown};
            }
            m_[id] = E{State::Orphan, 1, 0, now_, order_++};
            return {Outcome::Unknown};
        }
        E& e = it->second;
        switch (e.state) {
            case State::Orphan:  // counted, to be claimed by expect()
                e.received += 1;
                return {Outcome::Unknown};
            case State::Tombstone:
                return {Outcome::Duplicate};
            case State::Registered:
            case State::Waiting: {
                const bool wanted = e.received + 1 <= e.expected;
                if (!wanted) {
                    return {Outcome::Duplicate};
                }
                e.received += 1;
                const bool last = e.received == e.expected;
                const Outcome o = e.state == State::Registered ? Outcome::Early : Outcome::Matched;
                return {o, last, last ? e.waker : nullptr};
            }
        }
        return {Outcome::Unknown};
    }

    void start_wait(const std::string& id, KvReadyWaker* w) {
        E& e = m_.at(id);
        if (e.state == State::Registered) {
            e.state = State::Waiting;
        }
        e.waker = w;
    }

    void release(const std::string& id) {
        E& e = m_.at(id);
        e.state = State::Tombstone;
        e.since = now_;
        e.order = order_++;
        e.waker = nullptr;
    }

    void sweep() {
        for (auto it = m_.begin(); it != m_.end();) {
            if (unclaimed(it->second) && now_ - it->second.since >= ttl_) {
                it = m_.erase(it);
                ++ttl_evictions_;
            } else {
                ++it;
            }
        }
    }

    void advance(long d) { now_ += d; }
    long now() const { return now_; }
    const std::map<std::string, E>& entries() const { return m_; }
    std::uint64_t ttl_evictions() const { return ttl_evictions_; }
    std::uint64_t capacity_evictions() const { return capacity_; }

private:
    static bool unclaimed(const E& e) {
        return e.state == State::Orphan || e.state == State::Tombstone;
    }
    // A free slot, evicting the unclaimed entry that became unclaimed first if needed.
    bool room() {
        if (m_.size() < cap_) {
            return true;
        }
        auto oldest = m_.end();
        for (auto it = m_.begin(); it != m_.end(); ++it) {
            if (unclaimed(it->second) &&
                (oldest == m_.end() || it->second.order < oldest->second.order)) {
                oldest = it;
            }
        }
        if (oldest == m_.end()) {
            return false;
        }
        m_.erase(oldest);
        ++capacity_;
        return true;
    }

    long ttl_;
    std::size_t cap_;
    long now_ = 0;
    std::uint64_t order_ = 0;
    std::map<std::string, E> m_;
    std::uint64_t ttl_evictions_ = 0, capacity_ = 0;
};

void run_random(unsigned seed, int steps, std::size_t ids, std::size_t cap, long ttl,
                bool expect_capacity) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    auto pick = [&](std::size_t n) {
        return std::uniform_int_distribution<std::size_t>(0, n - 1)(rng);
    };
    KvReadyTable table({ms{ttl}, cap});
    Model model(ttl, cap);
    std::vector<std::string> pool;
    for (std::size_t i = 0; i < ids; ++i) {
        pool.push_back("req-" + std::to_string(i));
    }
    std::set<std::string> live;  // registrations the "flows" hold
    auto now = [&] { return kT0 + ms{model.now()}; };
    std::size_t wakers = 0;
    std::map<std::string, int> outcomes;

    for (int step = 0; step < steps; ++step) {
        SCOPED_TRACE("step " + std::to_string(step));
        const std::size_t op = pick(100);
        if (op < 18) {  // expect
            const std::string& id = pool[pick(ids)];
            const std::size_t n = 1 + pick(3);
            const Expect got = table.expect(id, n, now());
            ASSERT_EQ(got, model.expect(id, n));
            if (got == Expect::Ok) {
                live.insert(id);
            }
        } else if (op < 58) {  // arrive: mostly for live ids
            const bool for_live = !live.empty() && pick(3) != 0;
            std::string id = pool[pick(ids)];
            if (for_live) {
                auto it = live.begin();
                std::advance(it, static_cast<long>(pick(live.size())));
                id = *it;
            }
            const auto got = table.arrive(id, now());
            const auto want = model.arrive(id);
            ASSERT_EQ(got.outcome, want.outcome) << id;
            ASSERT_EQ(got.completed, want.completed) << id;
            ASSERT_EQ(got.wake, want.wake) << id;
            outcomes[std::to_string(static_cast<int>(got.outcome))] += 1;
        } else if (op < 68 && !live.empty()) {  // the wait begins
            auto it = live.begin();
            std::advance(it, static_cast<long>(pick(live.size())));
            KvReadyWaker* w = pick(2) != 0 ? fake_waker(++wakers) : nullptr;
            table.start_wait(*it);
            table.set_waker(*it, w);
            model.start_wait(*it, w);
        } else if (op < 80 && !live.empty()) {  // the request ends
            auto it = live.begin();
            std::advance(it, static_cast<long>(pick(live.size())));
            table.release(*it, now());
            model.release(*it);
            live.erase(it);
        } else if (op < 88) {
            model.sweep();
            table.sweep(now());
        } else {
            model.advance(static_cast<long>(pick(static_cast<std::size_t>(ttl / 3) + 1)));
        }

        ASSERT_EQ(table.size(), model.entries().size());
        ASSERT_LE(table.size(), cap);
        ASSERT_EQ(table.evictions().ttl, model.ttl_evictions());
        ASSERT_EQ(table.evictions().capacity, model.capacity_evictions());
        for (const std::string& id : pool) {
            auto it = model.entries().find(id);
            if (it == model.entries().end()) {
                ASSERT_FALSE(table.state(id).has_value()) << id;
                continue;
            }
            const Model::E& e = it->second;
            ASSERT_EQ(table.state(id), e.state) << id;
            ASSERT_EQ(table.received(id), e.received) << id;
            const bool ready = (e.state == State::Registered || e.state == State::Waiting) &&
                               e.received >= e.expected;
            ASSERT_EQ(table.ready(id), ready) << id;
        }
        std::size_t model_wakers = 0;
        for (const auto& [id, e] : model.entries()) {
            model_wakers += e.waker != nullptr ? 1 : 0;
        }
        ASSERT_EQ(table.wakers().size(), model_wakers);
    }
    // The interleavings reached every outcome and both eviction reasons.
    EXPECT_EQ(outcomes.size(), 4u);
    EXPECT_GT(table.evictions().ttl, 0u);
    if (expect_capacity) {
        EXPECT_GT(table.evictions().capacity, 0u);
    }
}

TEST(KvReadyTable, MatchesTheModelOnRandomInterleavings) {
    for (unsigned seed = 1; seed <= 8; ++seed) {
        run_random(seed, 5000, 10, 6, 60, true);
        if (HasFatalFailure()) {
            return;
        }
    }
}

TEST(KvReadyTable, MatchesTheModelWithRoomToSpare) {
    for (unsigned seed = 100; seed <= 103; ++seed) {
        run_random(seed, 5000, 24, 20, 200, false);
        if (HasFatalFailure()) {
            return;
        }
    }
}

}  // namespace
}  // namespace pdr::kv
