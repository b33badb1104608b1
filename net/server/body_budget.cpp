#include "net/server/body_budget.hpp"

#include <algorithm>
#include <atomic>
#include <memory>

#ifdef __GLIBC__
#include <malloc.h>
#endif

namespace pdr::server::detail {

namespace {

// A burst this large (the most bytes held at once since the last trim) is handed back to the
// OS once the bytes held fall to a quarter of it (to none, or under steady load with a few
// bodies always held): glibc and tcmalloc keep freed memory for reuse otherwise, and a burst of
// large bodies would leave the process at its peak for good.
constexpr std::size_t kTrimAfterPeak = 32u << 20;

}  // namespace
}  // namespace pdr::server::detail

// gperftools' C API, there when the program links tcmalloc (pdrouter does, router/CMakeLists.txt):
// its free memory goes back to the OS with this call, which glibc's malloc_trim would not touch.
extern "C" void MallocExtension_ReleaseFreeMemory() __attribute__((weak));

namespace pdr::server::detail {
namespace {

void trim_heap() noexcept {
    if (MallocExtension_ReleaseFreeMemory != nullptr) {
        MallocExtension_ReleaseFreeMemory();
        return;
    }
#ifdef __GLIBC__
    ::malloc_trim(0);
#endif
}

// The trim acts on the whole process (every worker's budget asks for it): at most one a second,
// and never at once. It runs kTrimDelay after it is asked for, so that the rest of a burst's
// bodies (answered in the same moment) are freed before it; a request while one is pending is
// folded into it.
constexpr Duration kTrimDelay{100};
constexpr Duration kMinTrimInterval{1000};
std::atomic<bool> trim_pending{false};
std::atomic<Clock::rep> last_trim{0};  // steady clock ticks; 0: never

void schedule_trim(const net::any_io_executor& ex) {
    if (trim_pending.exchange(true)) {
        return;
    }
    const Clock::time_point now = Clock::now();
    const Clock::time_point last{Clock::duration{last_trim.load()}};
    const Clock::time_point at = std::max(
        now + kTrimDelay, last.time_since_epoch().count() == 0 ? now : last + kMinTrimInterval);
    auto timer = std::make_shared<Timer>(ex);
    timer->expires_at(at);
    // Clears the pending mark however the wait ends: before the trim when it runs (a request
    // during a long trim then schedules the next one), or when a stopped context drops it.
    struct Pending {
        bool armed = true;
        ~Pending() {
            if (armed) {
                trim_pending.store(false);
            }
        }
    };
    timer->async_wait([timer, pending = std::make_shared<Pending>()](const error_code& ec) {
        if (ec) {
            return;
        }
        last_trim.store(Clock::now().time_since_epoch().count());
        pending->armed = false;
        trim_pending.store(false);
        trim_heap();
    });
}

}  // namespace

awaitable<bool> BodyBudget::take(std::size_t n, Clock::time_point deadline, Timer** wait) {
    if (limit_ == 0) {
        co_return true;
    }
    if (waiters_.empty() && used_ + n <= limit_) {
        used_ += n;
        peak_ = std::max(peak_, used_);
        publish();
        co_return true;
    }
    Timer timer(ex_);
    timer.expires_at(deadline);
    Waiter w{n, &timer};
    waiters_.push_back(&w);
    const auto pos = std::prev(waiters_.end());
    publish();
    *wait = &timer;
    co_await timer.async_wait();  // cancelled when granted or closed; expires at the deadline
    *wait = nullptr;
    if (!w.granted) {
        waiters_.erase(pos);
        grant_waiters();  // the head gave up: those behind it may fit now
        publish();
    }
    co_return w.granted;
}

void BodyBudget::give(std::size_t n) noexcept {
    if (limit_ == 0 || n == 0) {
        return;
    }
    used_ -= std::min(n, used_);
    grant_waiters();
    if (used_ <= peak_ / 4) {
        if (peak_ >= kTrimAfterPeak) {
            schedule_trim(ex_);
        }
        peak_ = used_;  // the next burst is measured from here
    }
    publish();
}

void BodyBudget::grant_waiters() noexcept {
    while (!waiters_.empty() && used_ + waiters_.front()->need <= limit_) {
        Waiter* w = waiters_.front();
        waiters_.pop_front();
        used_ += w->need;
        peak_ = std::max(peak_, used_);
        w->granted = true;
        w->timer->cancel();
    }
    publish();
}

awaitable<bool> BodyCharge::grow_to(std::size_t total, Clock::time_point deadline, Timer** wait) {
    if (budget_.limit() == 0) {
        co_return true;
    }
    total = std::min(total, budget_.limit());
    if (total <= bytes_) {
        co_return true;
    }
    const std::size_t more = total - bytes_;
    const bool ok = co_await budget_.take(more, deadline, wait);
    if (ok) {
        bytes_ += more;
    }
    co_return ok;
}

void BodyCharge::reset() noexcept {
    budget_.give(bytes_);
    bytes_ = 0;
}

}  // namespace pdr::server::detail
