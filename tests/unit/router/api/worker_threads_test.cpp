// How many worker threads the router runs: --threads as given; by default the CPUs of the
// affinity mask, capped by a cgroup v2 CPU limit (cpu.max, rounded up).
#include "router/api/run.hpp"

#include <gtest/gtest.h>

namespace pdr::api {
namespace {

TEST(QuotaCores, ACgroupLimitIsRoundedUpToWholeCores) {
    EXPECT_EQ(quota_cores("200000 100000"), 2u);
    EXPECT_EQ(quota_cores("200000 100000\n"), 2u);
    EXPECT_EQ(quota_cores("150000 100000"), 2u);
    EXPECT_EQ(quota_cores("50000 100000"), 1u);
    EXPECT_EQ(quota_cores("1600000 100000"), 16u);
}

TEST(QuotaCores, NoLimitOrAnUnreadableLineIsZero) {
    EXPECT_EQ(quota_cores("max 100000"), 0u);
    EXPECT_EQ(quota_cores(""), 0u);
    EXPECT_EQ(quota_cores("200000"), 0u);
    EXPECT_EQ(quota_cores("0 100000"), 0u);
    EXPECT_EQ(quota_cores("200000 0"), 0u);
    EXPECT_EQ(quota_cores("-5 100000"), 0u);
    EXPECT_EQ(quota_cores("2e5 100000"), 0u);
}

TEST(WorkerThreads, TheFlagWins) {
    config::Config cfg;
    cfg.threads = 3;
    EXPECT_EQ(worker_threads(cfg), 3u);
    cfg.threads = 1;
    EXPECT_EQ(worker_threads(cfg), 1u);
}

TEST(WorkerThreads, TheDefaultIsAtLeastOne) {
    config::Config cfg;
    EXPECT_GE(worker_threads(cfg), 1u);
}

}  // namespace
}  // namespace pdr::api
