// LockedExecutor: every function it runs holds the shared-state lock, a plain post, a coroutine
// started on it and each of its resumptions after an asynchronous wait; another thread's
// SharedLock waits for the handler to end.
#include "net/common/shared_state.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <thread>

namespace pdr {
namespace {

using namespace std::chrono_literals;

// True when another thread cannot take the lock now (it is held by someone).
bool held_elsewhere() {
    return std::async(std::launch::async,
                      [] {
                          std::unique_lock<std::recursive_mutex> l(shared_state_mutex(),
                                                                   std::try_to_lock);
                          return !l.owns_lock();
                      })
        .get();
}

TEST(LockedExecutor, APostedFunctionRunsHoldingTheLock) {
    net::io_context ioc;
    const net::any_io_executor ex = locked_executor(ioc);
    bool held = false;
    net::post(ex, [&] { held = held_elsewhere(); });
    ioc.run_for(3s);
    EXPECT_TRUE(held);
    EXPECT_FALSE(held_elsewhere());  // given back once the function ended
}

TEST(LockedExecutor, ACoroutineHoldsTheLockAfterEachResumption) {
    net::io_context ioc;
    const net::any_io_executor ex = locked_executor(ioc);
    std::atomic<int> held_steps{0};
    bool done = false;
    net::co_spawn(
        ex,
        [&]() -> awaitable<void> {
            for (int i = 0; i < 3; ++i) {
                Timer t(co_await net::this_coro::executor, 1ms);
                co_await t.async_wait();
                if (held_elsewhere()) {
                    ++held_steps;
                }
            }
            done = true;
        },
        net::detached);
    const auto until = Clock::now() + 3s;
    while (!done && Clock::now() < until) {
        ioc.run_one_for(100ms);
    }
    ASSERT_TRUE(done);
    EXPECT_EQ(held_steps.load(), 3);
}

TEST(LockedExecutor, AnotherThreadsSharedLockWaitsForTheHandler) {
    net::io_context ioc;
    const net::any_io_executor ex = locked_executor(ioc);
    std::promise<void> entered;
    std::promise<void> release;
    std::atomic<bool> handler_done{false};
    net::post(ex, [&] {
        entered.set_value();
        release.get_future().wait_for(3s);
        handler_done = true;
    });
    std::thread runner([&] { ioc.run_for(5s); });
    ASSERT_EQ(entered.get_future().wait_for(3s), std::future_status::ready);
    std::atomic<bool> got_lock{false};
    bool saw_handler_done = false;
    std::thread other([&] {
        SharedLock lock;
        saw_handler_done = handler_done.load();
        got_lock = true;
    });
    std::this_thread::sleep_for(20ms);  // the other thread is blocked on the lock meanwhile
    EXPECT_FALSE(got_lock.load());
    release.set_value();
    other.join();
    runner.join();
    EXPECT_TRUE(got_lock.load());
    EXPECT_TRUE(saw_handler_done);
}

std::uint64_t waits() {
    const SharedLockWaits w = shared_lock_waits();
    return w.spun + w.blocked;
}

TEST(SharedLock, AWaitForAnotherThreadIsCountedAndTheOwnersNestedLockIsNot) {
    const std::uint64_t before = waits();
    const std::uint64_t blocked_before = shared_lock_waits().blocked;
    {
        SharedLock outer;
        SharedLock nested;  // recursive: the owner does not wait
    }
    EXPECT_EQ(waits(), before);
    std::promise<void> held;
    std::promise<void> release;
    std::thread owner([&] {
        SharedLock lock;
        held.set_value();
        release.get_future().wait_for(3s);
    });
    ASSERT_EQ(held.get_future().wait_for(3s), std::future_status::ready);
    std::thread waiter([] { SharedLock lock; });
    // The waiter spins, then counts its wait as it blocks: release the owner once it has.
    const auto until = Clock::now() + 3s;
    while (shared_lock_waits().blocked == blocked_before && Clock::now() < until) {
        std::this_thread::yield();
    }
    release.set_value();
    owner.join();
    waiter.join();
    EXPECT_EQ(shared_lock_waits().blocked, blocked_before + 1);
    EXPECT_EQ(waits(), before + 1);
}

TEST(LockedExecutor, ExecutorsOverTheSameContextCompareEqual) {
    net::io_context ioc;
    net::io_context other;
    EXPECT_EQ(locked_executor(ioc), locked_executor(ioc));
    EXPECT_NE(locked_executor(ioc), locked_executor(other));
}

}  // namespace
}  // namespace pdr
