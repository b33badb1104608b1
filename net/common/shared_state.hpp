#pragma once
// The one lock over pdrouter's shared control state (--threads N).
//
// The data path runs on N worker threads, each with its own io_context, listener and upstream
// connections. What they share (the instance registry and its health loop, the lease keeper,
// the KV-ready table, the transfer agent's watches) lives on the control executor: a
// LockedExecutor, whose every handler (each step of a control coroutine: a probe's answer, a
// lease refresh, a ZMQ batch) runs holding SharedLock. A worker that calls into shared state
// (pick an instance, count a request in flight, hold a lease, expect a notification) takes
// SharedLock for that call; the shared classes do it in their own methods. So every access to
// shared state is serialized by one mutex, held for microseconds: the control plane does little
// per request, and a worker holds it only for the call.
//
// Rules: never hold it across a co_await (a coroutine may resume on another thread); wake a
// waiter on a worker by posting to that worker's executor, never by touching its I/O objects
// from here. Recursive: a locked call may make another.
#include "net/common/io.hpp"

#include <cstdint>
#include <mutex>
#include <type_traits>
#include <utility>

namespace pdr {

std::recursive_mutex& shared_state_mutex() noexcept;

// Acquisitions of the lock that found it held by another thread (the contention figures,
// pdrouter_shared_lock_waits_total{how}): `spun` got it by spinning a few microseconds (the
// holder's calls are that short), `blocked` had to sleep in the kernel.
struct SharedLockWaits {
    std::uint64_t spun = 0;
    std::uint64_t blocked = 0;
};
SharedLockWaits shared_lock_waits() noexcept;

class SharedLock {
public:
    SharedLock() : lock_(shared_state_mutex(), std::try_to_lock) {
        if (!lock_.owns_lock()) {
            wait();
        }
    }
    SharedLock(const SharedLock&) = delete;
    SharedLock& operator=(const SharedLock&) = delete;

private:
    void wait();  // spins, then blocks
    std::unique_lock<std::recursive_mutex> lock_;
};

// Wraps an executor so that each function it runs holds SharedLock. Queries go to the inner
// executor; require/prefer wrap what the inner executor gives.
template <class Inner>
class LockedExecutor {
public:
    explicit LockedExecutor(Inner inner) noexcept : inner_(std::move(inner)) {}

    template <class Property>
    auto query(const Property& p) const
        noexcept(noexcept(net::query(std::declval<const Inner&>(), p)))
            -> decltype(net::query(std::declval<const Inner&>(), p)) {
        return net::query(inner_, p);
    }
    template <class Property>
    auto require(const Property& p) const
        -> LockedExecutor<std::decay_t<decltype(net::require(std::declval<const Inner&>(), p))>> {
        return LockedExecutor<std::decay_t<decltype(net::require(inner_, p))>>(
            net::require(inner_, p));
    }
    template <class Property>
    auto prefer(const Property& p) const
        -> LockedExecutor<std::decay_t<decltype(net::prefer(std::declval<const Inner&>(), p))>> {
        return LockedExecutor<std::decay_t<decltype(net::prefer(inner_, p))>>(
            net::prefer(inner_, p));
    }

    template <class F>
    void execute(F&& f) const {
        inner_.execute([g = std::decay_t<F>(std::forward<F>(f))]() mutable {
            SharedLock lock;
            std::move(g)();
        });
    }

    friend bool operator==(const LockedExecutor& a, const LockedExecutor& b) noexcept {
        return a.inner_ == b.inner_;
    }
    friend bool operator!=(const LockedExecutor& a, const LockedExecutor& b) noexcept {
        return !(a == b);
    }

    const Inner& inner() const noexcept { return inner_; }

private:
    template <class>
    friend class LockedExecutor;
    Inner inner_;
};

// Runs `op` (a coroutine of the shared state) on the control executor and resumes the caller on
// its own executor. The caller's cancellation is not passed on: `op` runs to its end, and the
// caller sees its own cancellation at its next co_await (Asio hands a cancellation to a
// coroutine on another thread through a pointer that the caller's side may free first).
template <class T>
awaitable<T> on_control(const net::any_io_executor& control, awaitable<T> op) {
    auto hop =
        net::co_spawn(control, std::move(op),
                      net::bind_cancellation_slot(net::cancellation_slot(), net::use_awaitable));
    co_return co_await std::move(hop);
}

// The control executor over `ioc`: its handlers run holding SharedLock.
inline net::any_io_executor locked_executor(net::io_context& ioc) {
    return net::any_io_executor(LockedExecutor<net::io_context::executor_type>(ioc.get_executor()));
}

}  // namespace pdr
