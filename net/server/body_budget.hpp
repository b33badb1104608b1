#pragma once
// The bound on request-body bytes that all of a server's connections buffer together
// (Limits::max_buffered_body_bytes). A connection takes its share before it reads a body (the
// whole Content-Length; a chunked body in steps as it grows) and gives it back when the
// exchange ends, so connections that are still sending count too. A connection that does not
// fit waits, first come first served, until bytes are given back or its read deadline passes.
// After a burst of bodies (32 MiB or more held at once), memory the allocator keeps is handed
// back to the OS once the bytes held fall to a quarter of the burst's peak (to none, or under
// steady load to the few bodies still held). Internal to net/server.
#include "net/common/io.hpp"

#include <atomic>
#include <cstddef>
#include <list>

namespace pdr::server::detail {

class BodyBudget {
public:
    BodyBudget(net::any_io_executor ex, std::size_t limit) : ex_(std::move(ex)), limit_(limit) {}
    BodyBudget(const BodyBudget&) = delete;
    BodyBudget& operator=(const BodyBudget&) = delete;

    // Takes `n` bytes (n <= limit()), waiting until they fit or `deadline`. False
    // at the deadline, or when `*wait` (set to the timer while waiting) is cancelled by a
    // close. A limit of 0 is no limit.
    awaitable<bool> take(std::size_t n, Clock::time_point deadline, Timer** wait);
    void give(std::size_t n) noexcept;

    std::size_t limit() const noexcept { return limit_; }
    // Readable from any thread (the router's /metrics sums its workers' budgets).
    std::size_t used() const noexcept { return used_seen_.load(std::memory_order_relaxed); }
    std::size_t waiting() const noexcept { return waiting_seen_.load(std::memory_order_relaxed); }

private:
    struct Waiter {
        std::size_t need;
        Timer* timer;
        bool granted = false;
    };
    void grant_waiters() noexcept;
    void publish() noexcept {
        used_seen_.store(used_, std::memory_order_relaxed);
        waiting_seen_.store(waiters_.size(), std::memory_order_relaxed);
    }

    net::any_io_executor ex_;
    std::size_t limit_;
    std::size_t used_ = 0;
    std::size_t peak_ = 0;  // the most held since the last fall to a quarter of the peak
    std::list<Waiter*> waiters_;
    std::atomic<std::size_t> used_seen_{0};
    std::atomic<std::size_t> waiting_seen_{0};
};

// The share one connection holds; gives it back when reset or destroyed.
class BodyCharge {
public:
    explicit BodyCharge(BodyBudget& b) : budget_(b) {}
    ~BodyCharge() { reset(); }
    BodyCharge(const BodyCharge&) = delete;
    BodyCharge& operator=(const BodyCharge&) = delete;

    // Grows the share to `total` bytes (at most the whole budget); see BodyBudget::take.
    awaitable<bool> grow_to(std::size_t total, Clock::time_point deadline, Timer** wait);
    void reset() noexcept;
    std::size_t bytes() const noexcept { return bytes_; }

private:
    BodyBudget& budget_;
    std::size_t bytes_ = 0;
};

}  // namespace pdr::server::detail
