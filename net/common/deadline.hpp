#pragma once
// A read deadline that costs a clock read per operation instead of a timer per operation.
//
// Beast's tcp_stream arms a timer before every read and cancels it after (a heap insert, a
// heap removal and one more completion to dispatch each time). A Deadline keeps one timer
// that is armed at most once per deadline period: expires_after() only stores the new
// deadline; when the timer fires before it, the timer is re-armed for the stored deadline;
// when the deadline has passed, `on_expire` runs once (typically: close the socket, so the
// pending read completes with operation_aborted, and remember that it was a timeout).
#include "net/common/io.hpp"

#include <functional>
#include <memory>

namespace pdr {

class Deadline {
public:
    Deadline(const net::any_io_executor& ex, std::function<void()> on_expire);
    ~Deadline();
    Deadline(const Deadline&) = delete;
    Deadline& operator=(const Deadline&) = delete;

    void expires_after(Duration d);
    void expires_at(Clock::time_point t);
    // Disarms lazily: a pending wait stays until its own expiry (at most one deadline period)
    // and then ends without effect. It counts as work for io_context::run().
    void expires_never() noexcept;
    // Disarms and cancels a pending wait now: for objects that go idle for long (pooled
    // connections), so that nothing stays pending on their behalf.
    void cancel() noexcept;
    // Expires now, whatever the deadline: `on_expire` runs at once and expired() is true (a
    // stuck peer found by other means ends the pending operation as its timeout would).
    void expire_now();
    // True once `on_expire` ran for the current deadline (reset by expires_after/never).
    bool expired() const noexcept;

private:
    struct State;
    static void arm(const std::shared_ptr<State>& s);
    std::shared_ptr<State> state_;
};

}  // namespace pdr
