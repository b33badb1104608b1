// Config::progress_spin: in Thread mode the progress thread keeps polling for a while after an
// event instead of sleeping at once, so the next event of a steady stream needs no wake-up
// (docs/transfer.md, Tuning: how to choose a progress mode).
#include <gtest/gtest.h>
#include <time.h>

#include <chrono>
#include <thread>
#include <vector>

#include "tests/unit/transfer/helpers.hpp"

namespace pdx {
namespace {

using namespace std::chrono_literals;
using test::loopback_pair;
using test::make_req;

double process_cpu_ms() {
    timespec ts{};
    ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return double(ts.tv_sec) * 1e3 + double(ts.tv_nsec) / 1e6;
}

// CPU time of this process while its main thread sleeps for `d`: the agents' threads' share.
double cpu_ms_during(std::chrono::milliseconds d) {
    const double c0 = process_cpu_ms();
    std::this_thread::sleep_for(d);
    return process_cpu_ms() - c0;
}

// After an event the thread keeps polling for progress_spin (burning CPU), then sleeps again;
// without it, it sleeps at once.
TEST(ProgressThread, SpinsForProgressSpinAfterAnEventThenSleeps) {
    for (auto spin : {0ms, 150ms}) {
        SCOPED_TRACE("progress_spin " + std::to_string(spin.count()) + " ms");
        Config cfg;
        cfg.progress_spin = spin;
        cfg.heartbeat_interval = 30s;  // no heartbeat (an event) in the measured windows
        cfg.peer_timeout = 60s;
        auto p = loopback_pair(cfg);
        ASSERT_TRUE(p.a && p.b);
        const std::vector<BlockId> ids = {1};
        auto h =
            p.a->write_blocks(make_req(p.a_to_b, p.la, ids, p.lb, ids, 1, deadline_after(10s)));
        ASSERT_TRUE(h) << h.message();
        ASSERT_EQ(p.a->wait(*h, 10s), Status::Ok);
        const double spinning = cpu_ms_during(100ms);  // within the spin after the completion
        std::this_thread::sleep_for(200ms);            // past it
        const double asleep = cpu_ms_during(100ms);
        if (spin > 0ms) {
            EXPECT_GT(spinning, 20.0) << "the progress thread slept at once";
        } else {
            EXPECT_LT(spinning, 20.0) << "the progress thread polled without progress_spin";
        }
        EXPECT_LT(asleep, 20.0) << "the progress thread kept polling";
    }
}

}  // namespace
}  // namespace pdx
