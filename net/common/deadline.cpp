#include "net/common/deadline.hpp"

namespace pdr {

struct Deadline::State {
    State(const net::any_io_executor& ex, std::function<void()> fn)
        : timer(ex), on_expire(std::move(fn)) {}
    Timer timer;
    std::function<void()> on_expire;
    Clock::time_point deadline = Clock::time_point::max();
    Clock::time_point armed_for = Clock::time_point::max();  // the pending wait's expiry
    std::uint64_t generation = 0;  // of the pending wait; older completions are ignored
    bool waiting = false;
    bool expired = false;
    bool alive = true;  // false once the owner is gone
};

Deadline::Deadline(const net::any_io_executor& ex, std::function<void()> on_expire)
    : state_(std::make_shared<State>(ex, std::move(on_expire))) {}

Deadline::~Deadline() {
    state_->alive = false;
    state_->on_expire = nullptr;
    state_->timer.cancel();
}

void Deadline::expires_after(Duration d) {
    expires_at(Clock::now() + d);
}

void Deadline::expires_at(Clock::time_point t) {
    State& s = *state_;
    s.expired = false;
    s.deadline = t;
    // A pending wait that ends at or before the new deadline re-arms itself when it ends;
    // only an earlier deadline needs the timer moved.
    if (!s.waiting || s.armed_for > s.deadline) {
        arm(state_);
    }
}

void Deadline::expires_never() noexcept {
    state_->expired = false;
    state_->deadline = Clock::time_point::max();  // a pending wait ends and does nothing
}

void Deadline::cancel() noexcept {
    State& s = *state_;
    s.expired = false;
    s.deadline = Clock::time_point::max();
    if (s.waiting) {
        s.waiting = false;
        ++s.generation;  // the aborted completion is ignored
        s.timer.cancel();
    }
}

void Deadline::expire_now() {
    const std::shared_ptr<State> s = state_;  // on_expire may end the owner
    if (s->expired) {
        return;
    }
    cancel();
    s->expired = true;
    if (s->on_expire) {
        s->on_expire();
    }
}

bool Deadline::expired() const noexcept {
    return state_->expired;
}

void Deadline::arm(const std::shared_ptr<State>& s) {
    s->waiting = true;
    s->armed_for = s->deadline;
    const std::uint64_t gen = ++s->generation;
    s->timer.expires_at(s->deadline);  // cancels a pending wait (its completion is ignored)
    s->timer.async_wait([s, gen](const error_code&) {
        if (!s->alive || gen != s->generation) {
            return;
        }
        s->waiting = false;
        if (s->deadline == Clock::time_point::max()) {
            return;  // disarmed: the next expires_after arms again
        }
        if (Clock::now() < s->deadline) {
            arm(s);  // the deadline moved later while this wait was pending
            return;
        }
        s->deadline = Clock::time_point::max();
        s->expired = true;
        if (s->on_expire) {
            s->on_expire();
        }
    });
}

}  // namespace pdr
