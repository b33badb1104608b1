#pragma once
// Timestamps for the latency stats (Stats::post, Stats::completion): two per transfer, so they
// must be cheap. On x86-64 with an invariant TSC they are raw TSC reads: ~15 ns here against
// ~26 ns for Clock::now(), and without the fence of clock_gettime's ordered read, which waits
// for earlier instructions (the copy a shm write just issued) to finish. Ticks become
// nanoseconds when stats are read, by the ratio of Clock time to TSC ticks elapsed since the
// clock was created (the error is the skew of two clock reads over that whole span). Other
// CPUs, or a TSC without the invariant flag: Clock in nanoseconds (ratio 1).
#include <cstdint>

#include "pdx/types.hpp"

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

namespace pdx::detail {

class LatencyClock {
public:
    LatencyClock();
    std::uint64_t now() const noexcept {
#if defined(__x86_64__)
        if (tsc_) {
            return __rdtsc();
        }
#endif
        return static_cast<std::uint64_t>(
            std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
                .count());
    }
    // Ticks between two now() values (0 if `to` is earlier, e.g. TSCs not synchronised).
    static std::uint64_t between(std::uint64_t from, std::uint64_t to) noexcept {
        return to > from ? to - from : 0;
    }
    double ns_per_tick() const;  // measured over [construction, this call]; 1 without a TSC
    bool uses_tsc() const noexcept { return tsc_; }

private:
    bool tsc_ = false;
    Clock::time_point base_{};
    std::uint64_t base_ticks_ = 0;
};

// A LatencyStat kept in ticks; to_ns() converts it for Stats.
struct TickStat {
    std::uint64_t count = 0;
    std::uint64_t total = 0;
    std::uint64_t max = 0;
    void add(std::uint64_t ticks) noexcept {
        ++count;
        total += ticks;
        if (ticks > max) {
            max = ticks;
        }
    }
    LatencyStat to_ns(double ns_per_tick) const noexcept {
        return {count, static_cast<std::uint64_t>(double(total) * ns_per_tick),
                static_cast<std::uint64_t>(double(max) * ns_per_tick)};
    }
};

}  // namespace pdx::detail
