#pragma once
// A one-shot value that a callback (a transfer's completion, a note) hands to a waiting
// coroutine on the same strand: fire() sets it and wakes the waiter; wait_signal() waits for it
// with a deadline, and optionally ends early when the awaiting coroutine is cancelled (its
// client went away). Hold it by shared_ptr: the callback may fire after the waiter left.
#include "net/common/io.hpp"

#include <optional>

namespace pdr::sim {

template <class T>
struct Signal {
    explicit Signal(net::any_io_executor ex) : timer(std::move(ex)) {}
    void fire(T v) {
        if (!value) {
            value = std::move(v);
            timer.cancel();
        }
    }
    Timer timer;
    std::optional<T> value;
};

enum class WaitEnd { Fired, TimedOut, Cancelled };

template <class T>
awaitable<WaitEnd> wait_signal(Signal<T>& s, Clock::time_point deadline, bool cancellable) {
    while (!s.value) {
        if (Clock::now() >= deadline) {
            co_return WaitEnd::TimedOut;
        }
        s.timer.expires_at(deadline);
        if (cancellable) {
            auto [ec] = co_await s.timer.async_wait();
            if (!s.value && ec == net::error::operation_aborted) {
                co_return WaitEnd::Cancelled;
            }
        } else {
            // An empty slot: the request's cancellation does not reach this wait.
            auto token = net::bind_cancellation_slot(net::cancellation_slot(), use_tuple);
            auto [ec] = co_await s.timer.async_wait(token);
            (void)ec;
        }
    }
    co_return WaitEnd::Fired;
}

}  // namespace pdr::sim
