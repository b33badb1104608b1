// A transfer that ended (Expired, Canceled) while operations it posted still run keeps its
// local region pinned: release_region answers Busy although Stats::transfers_in_flight is 0
// already (issue 20 saw ~300 ms of that). Stats::transfers_settling and
// RegionInfo::transfers_settling say why, per region; once the operations complete the region
// is released. Loopback backend: a write is placed when the TARGET progresses, so a target
// that does not progress holds the operations deterministically.
#include <gtest/gtest.h>

#include <chrono>
#include <vector>

#include "tests/unit/transfer/eventually.hpp"
#include "tests/unit/transfer/helpers.hpp"

namespace pdx {
namespace {

using namespace std::chrono_literals;
using test::eventually;
using test::loopback_pair;
using test::make_req;

LayoutId pool(Agent& a, RegionId& region) {
    auto r = a.allocate_region(16 * 4096);
    EXPECT_TRUE(r) << r.message();
    region = *r;
    auto l = a.add_layout(Layout{*r, 0, 4096, 0, 16});
    EXPECT_TRUE(l) << l.message();
    return *l;
}

TEST(RegionRelease, EndedTransfersStillSettlingExplainTheBusyRegionPerRegion) {
    Config cfg;
    cfg.progress = ProgressMode::EventFd;
    auto pair = loopback_pair(cfg);
    ASSERT_TRUE(pair.a && pair.b);
    Agent& a = *pair.a;
    Agent& b = *pair.b;
    RegionId r1 = 0, r2 = 0, r3 = 0;
    const LayoutId l1 = pool(a, r1), l2 = pool(a, r2);
    pool(a, r3);  // never used
    const LayoutId lb = pair.lb;
    const PeerHandle p = pair.a_to_b;

    // Two writes from two regions to a target that does not progress: one expires, one is
    // canceled; neither operation can have run.
    const std::vector<BlockId> one = {1}, other = {2};
    auto expiring = a.write_blocks(make_req(p, l1, one, lb, one, 1, deadline_after(20ms)));
    auto canceled = a.write_blocks(make_req(p, l2, other, lb, other, 2, deadline_after(10s)));
    ASSERT_TRUE(expiring && canceled);
    ASSERT_TRUE(a.cancel(*canceled));
    ASSERT_TRUE(eventually([&] { return a.poll(*expiring) == Status::Expired; }, {&a}));

    const Stats s = a.stats();
    EXPECT_EQ(s.transfers_in_flight, 0u);
    EXPECT_EQ(s.transfers_settling, 2u);
    for (RegionId r : {r1, r2}) {
        auto info = a.region_info(r);
        ASSERT_TRUE(info) << info.message();
        EXPECT_EQ(info->transfers_in_flight, 1u) << "region " << r;
        EXPECT_EQ(info->transfers_settling, 1u) << "region " << r;
        auto busy = a.release_region(r);
        EXPECT_EQ(busy.status(), Status::Busy);
        EXPECT_NE(busy.message().find("(1, of which 1 already ended"), std::string::npos)
            << busy.message();
    }
    EXPECT_EQ(a.region_info(r3)->transfers_settling, 0u);

    // The target progresses: the operations run (the initiator ended the transfers already),
    // their completions come back, and the regions can go.
    ASSERT_TRUE(eventually([&] { return a.stats().transfers_settling == 0; }, {&b, &a}));
    EXPECT_EQ(a.region_info(r1)->transfers_settling, 0u);
    EXPECT_TRUE(a.release_region(r1));
    EXPECT_TRUE(a.release_region(r2));
    EXPECT_EQ(a.poll(*expiring), Status::Expired);  // terminal states never change
    EXPECT_EQ(a.poll(*canceled), Status::Canceled);
}

}  // namespace
}  // namespace pdx
