// Regression tests of add_peer: peer generations (connect before retiring, stale instances,
// unnamed peers) and the rkeys of an idempotent refresh. Each test failed before its fix.
#include <algorithm>
#include <fstream>
#include <string>

#include "tests/transfer/regression_fixture.hpp"
#include "wire.hpp"

namespace pdx::test {
namespace {

using PeersRegressionTest = BackendTest;

long maps_entries() {
    std::ifstream f("/proc/self/maps");
    std::string line;
    long n = 0;
    while (std::getline(f, line)) {
        ++n;
    }
    return n;
}

// A failed add_peer (here: a worker address the backend refuses) used to retire the live peer
// of the same name before connecting.
TEST_P(PeersRegressionTest, FailedAddPeerLeavesTheLiveGenerationAlone) {
    auto a = make("a"), b = make("b"), b_next = make("b");
    LayoutId la = pool(*a), lb = pool(*b);
    pool(*b_next);
    PeerHandle pb = connect(*a, *b);
    connect(*b, *a);
    auto d = detail::decode_descriptor(b_next->descriptor());
    ASSERT_TRUE(d) << d.message();
    d->address.clear();  // loopback: "bad address"; UCX: ucp_ep_create refuses it
    auto bad = a->add_peer(detail::encode_descriptor(*d));
    ASSERT_FALSE(bad);
    auto info = a->peer_info(pb);
    ASSERT_TRUE(info) << info.message();
    EXPECT_TRUE(info->alive) << "a failed add_peer retired the live generation";
    EXPECT_EQ(a->stats().peers, 1u);
    EXPECT_EQ(a->stats().peers_gone, 0u);
    EXPECT_TRUE(write_ok(*a, pb, la, lb, 1));
    // That instance never became a generation: its real descriptor is the next one.
    auto next = a->add_peer(b_next->descriptor());
    ASSERT_TRUE(next) << next.message();
    EXPECT_EQ(a->peer_info(*next)->generation, 2u);
    EXPECT_FALSE(a->peer_info(pb)->alive);
}

// A late copy of a replaced instance's descriptor used to come back as a new generation and
// retire the live one.
TEST_P(PeersRegressionTest, LateCopyOfAReplacedInstanceIsRefused) {
    auto a = make("a"), b1 = make("b"), b2 = make("b");
    LayoutId la = pool(*a), lb = pool(*b2);
    pool(*b1);
    auto blob1 = b1->descriptor();
    PeerHandle h1 = connect(*a, *b1);
    PeerHandle h2 = connect(*a, *b2);
    connect(*b2, *a);
    ASSERT_NE(h1, h2);
    auto late = a->add_peer(blob1);
    EXPECT_EQ(late.status(), Status::Invalid);
    EXPECT_NE(late.message().find("replaced"), std::string::npos) << late.message();
    auto info = a->peer_info(h2);
    ASSERT_TRUE(info) << info.message();
    EXPECT_TRUE(info->alive);
    EXPECT_EQ(info->generation, 2u);
    EXPECT_TRUE(write_ok(*a, h2, la, lb, 1));

    // The same when the old generation had been removed before its successor was added.
    auto c1 = make("c"), c2 = make("c");
    pool(*c1);
    LayoutId lc = pool(*c2);
    auto blob_c1 = c1->descriptor();
    PeerHandle hc1 = connect(*a, *c1);
    ASSERT_TRUE(a->remove_peer(hc1));
    PeerHandle hc2 = connect(*a, *c2);
    connect(*c2, *a);
    EXPECT_EQ(a->add_peer(blob_c1).status(), Status::Invalid);
    EXPECT_TRUE(a->peer_info(hc2)->alive);
    EXPECT_TRUE(write_ok(*a, hc2, la, lc, 2));
}

// Two different agents with the default empty name used to evict each other.
TEST_P(PeersRegressionTest, UnnamedPeersAreNeverReplaced) {
    auto a = make(""), b = make(""), c = make("");
    LayoutId la = pool(*a), lb = pool(*b), lc = pool(*c);
    PeerHandle pb = connect(*a, *b);
    connect(*b, *a);
    PeerHandle pc = connect(*a, *c);
    connect(*c, *a);
    ASSERT_NE(pb, pc);
    for (PeerHandle p : {pb, pc}) {
        auto info = a->peer_info(p);
        ASSERT_TRUE(info) << info.message();
        EXPECT_TRUE(info->alive) << "peer " << p;
        EXPECT_EQ(info->generation, 1u);
    }
    EXPECT_EQ(a->stats().peers, 2u);
    EXPECT_TRUE(write_ok(*a, pb, la, lb, 1));
    EXPECT_TRUE(write_ok(*a, pc, la, lc, 2));
}

// Each idempotent refresh used to unpack a new rkey per region and retire the old one until
// disconnect: over posix shm one more mapping of the peer's region per refresh.
TEST_P(PeersRegressionTest, RefreshWithTheSameDescriptorKeepsItsRkeys) {
    auto a = make("a"), b = make("b");
    LayoutId la = pool(*a), lb = pool(*b);
    auto blob = b->descriptor();
    PeerHandle pb = connect(*a, *b);
    connect(*b, *a);
    ASSERT_TRUE(write_ok(*a, pb, la, lb, 1));
    constexpr int kRefreshes = 64;
    const long before = maps_entries();
    for (int i = 0; i < kRefreshes; ++i) {
        auto r = a->add_peer(blob);
        ASSERT_TRUE(r) << r.message();
        ASSERT_EQ(*r, pb);
    }
    const long grown = maps_entries() - before;
    EXPECT_LT(grown, kRefreshes / 2)
        << "mappings grew by " << grown << " over " << kRefreshes << " refreshes";
    EXPECT_TRUE(write_ok(*a, pb, la, lb, 2));
    // A changed descriptor (a new region) still refreshes: old and new regions both work.
    LayoutId lb2 = pool(*b);
    auto r = a->add_peer(b->descriptor());
    ASSERT_TRUE(r) << r.message();
    EXPECT_EQ(*r, pb);
    EXPECT_TRUE(write_ok(*a, pb, la, lb2, 3));
    EXPECT_TRUE(write_ok(*a, pb, la, lb, 4));
}

// A removed peer that went away afterwards used to crash the agent (NONE error mode over tcp):
// UCX reported the closed endpoint's error to a handler argument that pointed at the freed
// connection record. The agent must keep working with its other peers through the window in
// which that late error arrives.
TEST_P(PeersRegressionTest, RemovedPeerThatGoesAwayLaterIsHarmless) {
    Config ca = config("a"), cb = config("b"), cc = config("c");
    ca.error_mode = cb.error_mode = cc.error_mode = ErrorMode::None;
    auto a = make(ca), b = make(cb), c = make(cc);
    LayoutId la = pool(*a), lb = pool(*b), lc = pool(*c);
    PeerHandle pb = connect(*a, *b);
    connect(*b, *a);
    PeerHandle pc = connect(*a, *c);
    connect(*c, *a);
    ASSERT_TRUE(write_ok(*a, pb, la, lb, 1));
    ASSERT_TRUE(a->remove_peer(pb));
    b.reset();
    // Over tcp the late error shows up within a few hundred ms; writes to c go on meanwhile.
    const auto until = std::chrono::steady_clock::now() + 1500ms;
    std::uint64_t id = 2;
    while (std::chrono::steady_clock::now() < until) {
        ASSERT_TRUE(write_ok(*a, pc, la, lc, id++));
    }
    EXPECT_FALSE(a->peer_info(pb) && a->peer_info(pb)->alive);
}

INSTANTIATE_TEST_SUITE_P(Backends, PeersRegressionTest, backend_params(), backend_label);

}  // namespace
}  // namespace pdx::test
