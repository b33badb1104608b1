#include "net/common/shared_state.hpp"

#include <atomic>
#include <thread>

namespace pdr {

namespace {

std::atomic<std::uint64_t> spun{0};
std::atomic<std::uint64_t> blocked{0};

// Tries before sleeping: about 2-4 us of pauses, several times the longest call made under the
// lock, far below the cost of a futex sleep and wake-up.
constexpr int kSpins = 128;

void pause() noexcept {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#else
    std::this_thread::yield();
#endif
}

}  // namespace

SharedLockWaits shared_lock_waits() noexcept {
    return {spun.load(std::memory_order_relaxed), blocked.load(std::memory_order_relaxed)};
}

void SharedLock::wait() {
    for (int i = 0; i < kSpins; ++i) {
        pause();
        if (lock_.try_lock()) {
            spun.fetch_add(1, std::memory_order_relaxed);
            return;
        }
    }
    blocked.fetch_add(1, std::memory_order_relaxed);
    lock_.lock();
}

std::recursive_mutex& shared_state_mutex() noexcept {
    static std::recursive_mutex m;
    return m;
}

}  // namespace pdr
