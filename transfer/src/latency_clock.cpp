#include "latency_clock.hpp"

#if defined(__x86_64__)
#include <cpuid.h>
#endif

namespace pdx::detail {
namespace {

bool invariant_tsc() {
#if defined(__x86_64__)
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (!__get_cpuid(0x80000000u, &a, &b, &c, &d) || a < 0x80000007u) {
        return false;
    }
    if (!__get_cpuid(0x80000007u, &a, &b, &c, &d)) {
        return false;
    }
    return (d & (1u << 8)) != 0;  // CPUID.80000007H:EDX[8], invariant TSC
#else
    return false;
#endif
}

}  // namespace

LatencyClock::LatencyClock() : tsc_(invariant_tsc()) {
    base_ = Clock::now();
    base_ticks_ = now();
}

double LatencyClock::ns_per_tick() const {
    if (!tsc_) {
        return 1.0;
    }
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - base_);
    const std::uint64_t ticks = between(base_ticks_, now());
    return ticks > 0 && ns.count() > 0 ? double(ns.count()) / double(ticks) : 0.0;
}

}  // namespace pdx::detail
