// KvReadyTable: per-req_id counts of LMCache "KV ready" notifications, with TTL and capacity
// eviction of the entries nobody waits for (PROTOCOLS.md §5).
#include "router/kv/kv_ready_table.hpp"

#include <algorithm>

namespace pdr::kv {

KvReadyTable::KvReadyTable(Options o) : opts_(o) {
    opts_.max_pending = std::max<std::size_t>(opts_.max_pending, 1);
}

Clock::time_point KvReadyTable::clamp(Clock::time_point now) noexcept {
    last_now_ = std::max(last_now_, now);
    return last_now_;
}

KvReadyTable::Entry* KvReadyTable::find(std::string_view id) {
    auto it = entries_.find(id);
    return it == entries_.end() ? nullptr : &it->second;
}

const KvReadyTable::Entry* KvReadyTable::find(std::string_view id) const {
    auto it = entries_.find(id);
    return it == entries_.end() ? nullptr : &it->second;
}

bool KvReadyTable::make_room() {
    if (entries_.size() < opts_.max_pending) {
        return true;
    }
    if (unclaimed_.empty()) {
        return false;
    }
    evict_front(evictions_.capacity);
    return true;
}

void KvReadyTable::evict_front(std::uint64_t& counter) {
    Node* node = unclaimed_.front();
    unclaimed_.pop_front();
    entries_.erase(entries_.find(node->first));
    ++counter;
}

void KvReadyTable::to_unclaimed(Node& node, State s, Clock::time_point now) {
    Entry& e = node.second;
    e.state = s;
    e.since = now;
    e.expected = 0;
    e.waker = nullptr;
    e.in_unclaimed = unclaimed_.insert(unclaimed_.end(), &node);
}

void KvReadyTable::claim(Entry& e) {
    unclaimed_.erase(e.in_unclaimed);
}

KvReadyTable::Expect KvReadyTable::expect(std::string_view id, std::size_t expected,
                                          Clock::time_point now) {
    clamp(now);
    if (id.empty() || id.size() > kMaxIdBytes) {
        return Expect::BadId;
    }
    expected = std::max<std::size_t>(expected, 1);
    Entry* e = find(id);
    if (e == nullptr) {
        if (!make_room()) {
            return Expect::Full;
        }
        e = &entries_.try_emplace(std::string(id)).first->second;
    } else if (e->state == State::Registered || e->state == State::Waiting) {
        return Expect::InUse;
    } else {
        claim(*e);
        if (e->state == State::Tombstone) {
            e->received = 0;  // a new request under an old id: the old one's are not its own
        }
    }
    e->state = State::Registered;
    e->expected = expected;
    e->waker = nullptr;
    return Expect::Ok;
}

KvReadyTable::Arrival KvReadyTable::arrive(std::string_view id, Clock::time_point now) {
    now = clamp(now);
    auto it = entries_.find(id);
    if (it == entries_.end()) {
        if (!make_room()) {
            ++evictions_.capacity;  // the new orphan is dropped
            return Arrival{Outcome::Unknown};
        }
        it = entries_.try_emplace(std::string(id)).first;
        it->second.received = 1;
        to_unclaimed(*it, State::Orphan, now);
        return Arrival{Outcome::Unknown};
    }
    Entry& e = it->second;
    switch (e.state) {
        case State::Orphan:
            ++e.received;
            return Arrival{Outcome::Unknown};
        case State::Tombstone:
            return Arrival{Outcome::Duplicate};
        case State::Registered:
        case State::Waiting:
            break;
    }
    if (e.received >= e.expected) {
        return Arrival{Outcome::Duplicate};
    }
    ++e.received;
    Arrival a{e.state == State::Waiting ? Outcome::Matched : Outcome::Early};
    if (e.received == e.expected) {
        a.completed = true;
        a.wake = e.waker;
    }
    return a;
}

void KvReadyTable::start_wait(std::string_view id) {
    Entry* e = find(id);
    if (e != nullptr && e->state == State::Registered) {
        e->state = State::Waiting;
    }
}

void KvReadyTable::set_waker(std::string_view id, KvReadyWaker* waker) {
    Entry* e = find(id);
    if (e != nullptr && (e->state == State::Registered || e->state == State::Waiting)) {
        e->waker = waker;
    }
}

void KvReadyTable::release(std::string_view id, Clock::time_point now) {
    now = clamp(now);
    auto it = entries_.find(id);
    if (it == entries_.end()) {
        return;
    }
    const State s = it->second.state;
    if (s == State::Registered || s == State::Waiting) {
        to_unclaimed(*it, State::Tombstone, now);
    }
}

std::size_t KvReadyTable::sweep(Clock::time_point now) {
    now = clamp(now);
    std::size_t n = 0;
    while (!unclaimed_.empty() && now - unclaimed_.front()->second.since >= opts_.ttl) {
        evict_front(evictions_.ttl);
        ++n;
    }
    return n;
}

std::optional<KvReadyTable::State> KvReadyTable::state(std::string_view id) const {
    const Entry* e = find(id);
    if (e == nullptr) {
        return std::nullopt;
    }
    return e->state;
}

std::size_t KvReadyTable::received(std::string_view id) const {
    const Entry* e = find(id);
    return e == nullptr ? 0 : e->received;
}

bool KvReadyTable::ready(std::string_view id) const {
    const Entry* e = find(id);
    return e != nullptr && (e->state == State::Registered || e->state == State::Waiting) &&
           e->received >= e->expected;
}

KvReadyWaker* KvReadyTable::waker(std::string_view id) const {
    const Entry* e = find(id);
    return e == nullptr ? nullptr : e->waker;
}

std::vector<KvReadyWaker*> KvReadyTable::wakers() const {
    std::vector<KvReadyWaker*> out;
    for (const auto& [id, e] : entries_) {
        if (e.waker != nullptr) {
            out.push_back(e.waker);
        }
    }
    return out;
}

}  // namespace pdr::kv
