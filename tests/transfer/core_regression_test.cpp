// Regression tests of the transfer core: descriptor strides, nested callbacks across agents,
// durations (saturation, renew, default deadline) and expired-lease reporting. Each test (but
// DeadlineAfter, the helper the fix added) failed before its fix.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <thread>

#include "pdx/pdx.h"
#include "plan.hpp"
#include "tests/transfer/peer_proto.hpp"
#include "tests/transfer/regression_fixture.hpp"
#include "wire.hpp"

namespace pdx::test {
namespace {

using CoreRegressionTest = BackendTest;

// Posts one write of block 0 from a C agent made from `cc` (with this test's backend and
// transports) to block 0 of `lb` on `b`; the agent and the transfer handle come back.
void post_one_c_write(pdx_config_t cc, const Config& cpp, Agent& b, LayoutId lb, pdx_agent_t** ca,
                      std::uint64_t* h) {
    cc.name = cpp.name.c_str();
    cc.backend = static_cast<pdx_backend_t>(cpp.backend);
    cc.transports = cpp.transports.c_str();
    cc.net_devices = cpp.net_devices.c_str();
    ASSERT_EQ(pdx_agent_create(&cc, ca), PDX_OK) << pdx_last_error();
    std::uint32_t region = 0, layout = 0;
    ASSERT_EQ(pdx_allocate_region(*ca, kBlock, &region), PDX_OK);
    pdx_layout_t l{region, 0, kBlock, 0, 1};
    ASSERT_EQ(pdx_add_layout(*ca, &l, &layout), PDX_OK);
    auto blob = b.descriptor();
    std::uint64_t peer = 0;
    ASSERT_EQ(pdx_add_peer(*ca, blob.data(), blob.size(), &peer), PDX_OK) << pdx_last_error();
    const std::uint32_t one[] = {0};
    ASSERT_EQ(
        pdx_write_blocks(*ca, peer, layout, one, lb, one, 1, 1, PDX_DEADLINE_DEFAULT, nullptr, h),
        PDX_OK)
        << pdx_last_error();
}

// A remote layout with stride 0 used to be accepted and mapped every block onto block 0.
TEST_P(CoreRegressionTest, DescriptorWithStrideZeroIsRefused) {
    auto a = make("a"), b = make("b");
    pool(*a);
    pool(*b);
    auto blob = b->descriptor();
    // The last layout record ends with u64 stride, u32 count (docs/transfer.md).
    std::memset(blob.data() + blob.size() - 12, 0, 8);
    detail::reseal_descriptor(blob);  // a valid checksum: the stride check itself must refuse it
    auto s = inspect_descriptor(blob);
    EXPECT_EQ(s.status(), Status::Invalid);
    EXPECT_NE(s.message().find("stride"), std::string::npos) << s.message();
    auto h = a->add_peer(blob);
    EXPECT_EQ(h.status(), Status::Invalid);
    EXPECT_NE(h.message().find("stride"), std::string::npos) << h.message();
    EXPECT_TRUE(a->peers().empty());
}

// An agent whose UCX backend could not be built (no usable transport or device: a typo in
// transports/net_devices, or a bad UCX_TLS) used to crash in the half-built backend's destructor
// (a worker flush on a null worker) instead of returning a status.
TEST(UcxCreateRegression, NoUsableTransportOrDeviceIsAStatusNotACrash) {
    if (!ucx_available()) {
        GTEST_SKIP() << "built without UCX";
    }
    struct Case {
        const char* transports;
        const char* devices;
    };
    for (Case c : {Case{"nosuchtl", ""}, Case{"tcp", "nosuchdev"}}) {
        Config cfg;
        cfg.name = "no-transport";
        cfg.backend = BackendKind::Ucx;
        cfg.transports = c.transports;
        cfg.net_devices = c.devices;
        auto agent = Agent::create(cfg);
        ASSERT_FALSE(agent) << c.transports << "/" << c.devices;
        EXPECT_EQ(agent.status(), Status::Failed) << agent.message();
        EXPECT_FALSE(agent.message().empty());

        pdx_config_t cc;
        pdx_config_init(&cc);
        cc.name = "no-transport-c";
        cc.transports = c.transports;
        cc.net_devices = c.devices;
        pdx_agent_t* ca = nullptr;
        EXPECT_EQ(pdx_agent_create(&cc, &ca), PDX_FAILED) << c.transports << "/" << c.devices;
        EXPECT_EQ(ca, nullptr);
        EXPECT_GT(std::strlen(pdx_last_error()), 0u);
    }
}

TEST(PlanRegression, RefusesAStrideBelowTheBlockSize) {
    const detail::PlanSide dense{Layout{0, 0, 16, 16, 8}, 0x1000};
    const detail::PlanSide zero{Layout{0, 0, 16, 0, 8}, 0x100000};
    const BlockId ids[] = {0, 1, 2};
    for (bool write : {true, false}) {
        auto p = detail::make_plan(dense, zero, ids, ids, write, {1 << 20, 100});
        EXPECT_EQ(p.status(), Status::Invalid);
        EXPECT_NE(p.message().find("stride"), std::string::npos) << p.message();
        p = detail::make_plan(zero, dense, ids, ids, write, {1 << 20, 100});
        EXPECT_EQ(p.status(), Status::Invalid);
    }
}

// A's callback drives B, whose callback drives A again (A -> B -> A), and A's callback drives A
// after B: the re-entrancy guard used to forget A once B's callbacks returned, and A relocked
// its own callback mutex on the same thread (deadlock).
TEST_P(CoreRegressionTest, CallbacksMayDriveProgressOfAnyAgentNested) {
    auto a = make("a", ProgressMode::EventFd), b = make("b", ProgressMode::EventFd);
    LayoutId la = pool(*a), lb = pool(*b);
    PeerHandle pb = connect(*a, *b);
    PeerHandle pa = connect(*b, *a);
    std::atomic<int> stage{0};  // 1: in A's callback, 2: B's callback ran inside it, 3: done
    std::atomic<bool> finished{false};
    // A deadlock cannot be unwound: report it and end the process.
    std::thread watchdog([&] {
        const auto until = Clock::now() + 30s;
        while (!finished.load() && Clock::now() < until) {
            std::this_thread::sleep_for(5ms);
        }
        if (!finished.load()) {
            std::fprintf(stderr, "FAILED: deadlock in nested callbacks (stage %d)\n", stage.load());
            std::fflush(stderr);
            ::_exit(1);
        }
    });
    const BlockId one[] = {0};
    TransferRequest qb = make_req(pa, lb, one, la, one, 2);
    qb.on_complete = [&](const TransferResult&) {
        a->progress();  // B's callback, itself inside A's callback
        stage = 2;
    };
    TransferRequest qa = make_req(pb, la, one, lb, one, 1);
    qa.on_complete = [&](const TransferResult&) {
        stage = 1;
        auto h = b->write_blocks(qb);  // its callback can only run inside this one
        EXPECT_TRUE(h) << h.message();
        const auto until = Clock::now() + 10s;
        while (h && stage.load() == 1 && Clock::now() < until) {
            b->progress();
            a->progress();  // A's own progress from its callback
        }
        EXPECT_EQ(stage.load(), 2) << "B's callback did not run inside A's";
        stage = 3;
    };
    auto h = a->write_blocks(qa);
    ASSERT_TRUE(h) << h.message();
    EXPECT_TRUE(eventually([&] { return stage.load() == 3; }, {a.get(), b.get()}, 20s));
    finished = true;
    watchdog.join();
}

TEST(DeadlineAfter, SaturatesInsteadOfOverflowing) {
    const auto now = Clock::now();
    const auto never = Clock::time_point::max();
    EXPECT_EQ(deadline_after(std::chrono::milliseconds::max(), now), never);
    EXPECT_EQ(deadline_after(std::chrono::hours::max(), now), never);
    EXPECT_EQ(deadline_after(std::chrono::nanoseconds::max(), now), never);
    EXPECT_EQ(deadline_after(never - now, now), never);
    EXPECT_EQ(deadline_after(5s, now), now + 5s);
    EXPECT_EQ(deadline_after(0ms, now), now);
    EXPECT_EQ(deadline_after(-5s, now), now);
    EXPECT_EQ(deadline_after(std::chrono::milliseconds::min(), now), now);
}

// wait(h, milliseconds::max()) used to overflow now + timeout and return InProgress at once.
TEST_P(CoreRegressionTest, WaitWithTheLongestTimeoutWaitsUntilTerminal) {
    for (ProgressMode mode : {ProgressMode::Thread, ProgressMode::EventFd}) {
        auto a = make("a", mode);
        auto b = make("b", ProgressMode::EventFd);  // never progressed: the write stays pending
        LayoutId la = pool(*a), lb = pool(*b);      // (except over shm, where it lands at once)
        PeerHandle pb = connect(*a, *b);
        const BlockId one[] = {0};
        auto h = a->write_blocks(make_req(pb, la, one, lb, one, 1, Clock::now() + 300ms));
        ASSERT_TRUE(h) << h.message();
        const Status s = a->wait(*h, std::chrono::milliseconds::max());
        EXPECT_TRUE(s == Status::Expired || s == Status::Ok)
            << to_string(s) << " (mode " << int(mode) << ")";
    }
}

// lease(ttl = milliseconds::max()) used to expire at once; renew() accepted ttl <= 0.
TEST_P(CoreRegressionTest, LeaseTtlsSaturateAndRenewRefusesNonPositiveTtls) {
    auto a = make("a", ProgressMode::EventFd);
    LayoutId la = pool(*a);
    const BlockId b0[] = {0}, b1[] = {1};
    ASSERT_TRUE(a->lease(1, la, b0, std::chrono::milliseconds::max()));
    EXPECT_TRUE(a->expire_leases().empty());
    EXPECT_TRUE(a->is_leased(la, 0));
    ASSERT_TRUE(a->lease(2, la, b1, 1h));
    EXPECT_EQ(a->renew(2, -5s).status(), Status::Invalid);
    EXPECT_EQ(a->renew(2, 0ms).status(), Status::Invalid);
    const std::uint64_t both[] = {1, 2};
    EXPECT_EQ(a->renew(both, 0ms), 0u);
    EXPECT_EQ(a->renew(both, -1ms), 0u);
    EXPECT_TRUE(a->expire_leases().empty());
    EXPECT_TRUE(a->is_leased(la, 1));
    EXPECT_TRUE(a->renew(2, std::chrono::milliseconds::max()));
    EXPECT_TRUE(a->expire_leases().empty());
    EXPECT_EQ(a->renew(both, 1h), 2u);
    EXPECT_EQ(a->stats().leases_active, 2u);
}

// Config::default_deadline <= 0 (C: default_deadline_ms = 0) used to be kept: every request
// without a deadline of its own expired at the next tick.
TEST_P(CoreRegressionTest, ZeroDefaultDeadlineMeansTheDocumentedDefault) {
    for (auto d : {0ms, -1ms}) {
        Config c = config("a", ProgressMode::EventFd);
        c.default_deadline = d;
        auto a = make(c);
        EXPECT_EQ(a->config().default_deadline, 30000ms);
        auto b = make("b", ProgressMode::EventFd);  // never progressed
        LayoutId la = pool(*a), lb = pool(*b);
        PeerHandle pb = connect(*a, *b);
        const BlockId one[] = {0};
        auto h = a->write_blocks(make_req(pb, la, one, lb, one, 1));  // the default deadline
        ASSERT_TRUE(h) << h.message();
        const auto until = Clock::now() + 30ms;
        while (Clock::now() < until) {
            a->progress();  // ticks: deadlines are checked
            std::this_thread::sleep_for(1ms);
        }
        EXPECT_NE(a->poll(*h), Status::Expired);
    }
    // The same through the C API.
    pdx_config_t cc;
    pdx_config_init(&cc);
    cc.progress = PDX_PROGRESS_EVENTFD;
    cc.default_deadline_ms = 0;
    auto b = make("c-b", ProgressMode::EventFd);  // never progressed
    LayoutId lb = pool(*b);
    pdx_agent_t* ca = nullptr;
    std::uint64_t h = 0;
    ASSERT_NO_FATAL_FAILURE(post_one_c_write(cc, config("c-a"), *b, lb, &ca, &h));
    const auto until = Clock::now() + 30ms;
    while (Clock::now() < until) {
        pdx_progress(ca);
        std::this_thread::sleep_for(1ms);
    }
    EXPECT_NE(pdx_poll(ca, h), PDX_EXPIRED);
    pdx_agent_destroy(ca);
}

// Ids expired by the progress loop beyond 65 536 queued used to be dropped silently.
TEST_P(CoreRegressionTest, ExpiredLeaseIdsAreNeverDropped) {
    auto a = make("a", ProgressMode::EventFd);  // lease sweeps only inside our progress() calls
    auto region = a->allocate_region(4096);
    ASSERT_TRUE(region) << region.message();
    auto layout = a->add_layout(Layout{*region, 0, 64, 64, 64});
    ASSERT_TRUE(layout) << layout.message();
    constexpr std::uint64_t kFirst = 65536, kMore = 100;
    const BlockId one[] = {0};
    auto lease_range = [&](std::uint64_t from, std::uint64_t to) {
        bool all = true;
        for (std::uint64_t id = from; id < to; ++id) {
            all = a->lease(id, *layout, one, 1ms).ok() && all;
        }
        return all;
    };
    auto swept = [&](std::uint64_t n) {
        return eventually([&] { return a->stats().leases_expired >= n; }, {a.get()}, 20s);
    };
    ASSERT_TRUE(lease_range(0, kFirst));
    ASSERT_TRUE(swept(kFirst));  // queued by the progress loop, not collected yet
    ASSERT_TRUE(lease_range(kFirst, kFirst + kMore));
    ASSERT_TRUE(swept(kFirst + kMore));
    auto got = a->expire_leases();
    ASSERT_EQ(got.size(), kFirst + kMore);
    std::sort(got.begin(), got.end());
    for (std::uint64_t i = 0; i < got.size(); ++i) {
        ASSERT_EQ(got[i], i);
    }
    EXPECT_FALSE(a->is_leased(*layout, 0));
}

// The same memory registered twice is two regions; releasing one must leave the other a valid
// write target (the Am write path over tcp used to forget every region at that address).
TEST_P(CoreRegressionTest, MemoryRegisteredTwiceStaysWritableAfterOneRegionIsReleased) {
    auto src = make("src");
    auto dst = make("dst");
    const LayoutId sl = pool(*src);
    std::vector<std::byte> memory(kBlock * kBlocks);
    auto first = dst->register_region(memory.data(), memory.size());
    auto second = dst->register_region(memory.data(), memory.size());
    ASSERT_TRUE(first && second) << first.message() << " / " << second.message();
    auto dl = dst->add_layout(Layout{*second, 0, kBlock, 0, kBlocks});
    ASSERT_TRUE(dl) << dl.message();
    PeerHandle peer = connect(*src, *dst);
    ASSERT_TRUE(dst->release_region(*first)) << "the first registration is unused";
    fill_block(src->block(sl, 0), 91, 0);
    ASSERT_TRUE(write_ok(*src, peer, sl, *dl, 1));
    EXPECT_EQ(check_block(dst->block(*dl, 0), 91, 0), -1);
}

// A write's notification of a kind notify() refuses used to be accepted, sent, and dropped by
// the receiver.
TEST_P(CoreRegressionTest, WriteWithAnUnknownNotificationKindIsRefused) {
    auto a = make("a"), b = make("b");
    LayoutId la = pool(*a), lb = pool(*b);
    PeerHandle pb = connect(*a, *b);
    connect(*b, *a);
    const BlockId one[] = {0};
    TransferRequest req = make_req(pb, la, one, lb, one, 1);
    Notification n;
    n.kind = static_cast<NotifyKind>(9);
    req.notify = n;
    auto h = a->write_blocks(req);
    ASSERT_FALSE(h);
    EXPECT_EQ(h.status(), Status::Invalid);
    EXPECT_EQ(a->stats().transfers_posted, 0u);
    n.kind = NotifyKind::Done;
    req.notify = n;
    auto ok = a->write_blocks(req);
    ASSERT_TRUE(ok) << ok.message();
    EXPECT_EQ(a->wait(*ok, 10s), Status::Ok);
}

// remove_peer on a handle a newer generation replaced used to return Ok.
TEST_P(CoreRegressionTest, RemovePeerOnAReplacedHandleIsNotFound) {
    auto a = make("a"), b1 = make("b"), b2 = make("b");
    pool(*a);
    pool(*b1);
    pool(*b2);
    PeerHandle h1 = connect(*a, *b1);
    PeerHandle h2 = connect(*a, *b2);
    ASSERT_NE(h1, h2);
    auto r = a->remove_peer(h1);
    ASSERT_FALSE(r);
    EXPECT_EQ(r.status(), Status::NotFound);
    EXPECT_TRUE(a->peer_info(h2)->alive);
    EXPECT_TRUE(a->remove_peer(h2));
}

// renew(list) used to count a lease once per listing of its id; leasing blocks of a released
// region used to succeed.
TEST_P(CoreRegressionTest, RenewCountsEachLeaseOnceAndReleasedRegionsCannotBeLeased) {
    auto a = make("a");
    LayoutId la = pool(*a);
    const BlockId ids[] = {1, 2};
    ASSERT_TRUE(a->lease(42, la, ids, 10s));
    const std::uint64_t again[] = {42, 42, 42, 7};
    EXPECT_EQ(a->renew(again, 10s), 1u);
    auto region = a->allocate_region(kBlock * 2);
    ASSERT_TRUE(region) << region.message();
    auto layout = a->add_layout(Layout{*region, 0, kBlock, kBlock, 2});
    ASSERT_TRUE(layout) << layout.message();
    ASSERT_TRUE(a->release_region(*region));
    auto leased = a->lease(43, *layout, ids, 10s);
    ASSERT_FALSE(leased);
    EXPECT_EQ(leased.status(), Status::Invalid);
}

// allocate_region(SIZE_MAX) used to crash the loopback backend (the aligned new wrapped the
// size); 2^50 threw std::bad_alloc out of an API of status values there, and over UCX a size
// UCX maps lazily was then zero-filled into the OOM killer. Sizes beyond the machine's memory
// are refused before anything is allocated.
TEST_P(CoreRegressionTest, AbsurdRegionSizesAreRefusedWithAStatus) {
    auto a = make("a");
    for (std::size_t bytes : {SIZE_MAX, SIZE_MAX / 2 + 1, std::size_t{1} << 50}) {
        auto r = a->allocate_region(bytes);
        ASSERT_FALSE(r) << bytes;
        EXPECT_EQ(r.status(), Status::Invalid) << bytes;
    }
    EXPECT_TRUE(a->allocate_region(kBlock));
}

// A pdx_config_t left zeroed (no pdx_config_init) used to refuse every transfer: its
// max_transfer_bytes of 0 was kept while the other zero fields meant their defaults.
// pdx_arm(NULL) used to say "safe to wait".
TEST_P(CoreRegressionTest, ZeroedCConfigGetsDefaultLimits) {
    pdx_config_t cc;
    std::memset(&cc, 0, sizeof cc);
    cc.progress = PDX_PROGRESS_THREAD;
    auto b = make("zero-b");
    LayoutId lb = pool(*b);
    pdx_agent_t* ca = nullptr;
    std::uint64_t h = 0;
    ASSERT_NO_FATAL_FAILURE(post_one_c_write(cc, config("zero-a"), *b, lb, &ca, &h));
    EXPECT_EQ(pdx_wait(ca, h, 10000), PDX_OK);
    pdx_agent_destroy(ca);
    EXPECT_EQ(pdx_arm(nullptr), -1);
}

// `a` and `b` connected both ways, `a` with a pool, `b` with a pool whose region the test
// releases later.
struct ReleasablePair {
    LayoutId la = 0, lb = 0;
    RegionId region = 0;  // b's
    PeerHandle pb = kNoPeer;
};
void connect_releasable(Agent& a, Agent& b, ReleasablePair& p) {
    p.la = test::dense_pool(a, kBlock, kBlocks);
    auto r = b.allocate_region(kBlock * kBlocks);
    ASSERT_TRUE(r) << r.message();
    auto l = b.add_layout(Layout{*r, 0, kBlock, 0, kBlocks});
    ASSERT_TRUE(l) << l.message();
    p.region = *r;
    p.lb = *l;
    p.pb = test::connect_peer(a, b);
    test::connect_peer(b, a);
}

// A queued write whose next chunk the backend refused when posting it (UCX: the target released
// the region and the initiator's refreshed copy of its descriptor has no rkey for it any more)
// used to end with that refusal's status, Invalid, which is not terminal: the transfer was then
// finished again by each later event (its settle, its deadline), counting it failed and
// sending its Failed note each time and wrapping transfers_in_flight below zero.
TEST_P(CoreRegressionTest, QueuedWriteRefusedByTheBackendEndsOnceAsFailed) {
    Config ca = config("a", ProgressMode::EventFd);
    ca.inline_post_ops = 0;  // every write waits in the post queue for progress()
    auto a = make(ca), b = make("b");
    ReleasablePair p;
    ASSERT_NO_FATAL_FAILURE(connect_releasable(*a, *b, p));
    const BlockId ids[] = {0, 2, 4};
    TransferRequest w = make_req(p.pb, p.la, ids, p.lb, ids, 7, Clock::now() + 2s);
    w.notify = Notification{NotifyKind::Done, 7, 0, 1, Status::Ok, "never"};
    auto h = a->write_blocks(w);
    ASSERT_TRUE(h) << h.message();
    ASSERT_TRUE(b->release_region(p.region));
    auto refreshed = a->add_peer(b->descriptor());
    ASSERT_TRUE(refreshed) << refreshed.message();
    ASSERT_EQ(*refreshed, p.pb);
    ASSERT_TRUE(eventually([&] { return is_terminal(a->poll(*h)); }, {a.get()}));
    // past the deadline too: an expiry must not finish it again
    const auto until = Clock::now() + 2500ms;
    while (Clock::now() < until) {
        a->progress();
        std::this_thread::sleep_for(5ms);
    }
    const Status s = a->poll(*h);
    EXPECT_TRUE(s == Status::Failed || s == Status::PeerGone) << to_string(s);
    const Stats st = a->stats();
    EXPECT_EQ(st.transfers_in_flight, 0u);
    EXPECT_EQ(st.transfers_failed + st.transfers_peer_gone + st.transfers_expired, 1u);
    EXPECT_EQ(st.transfers_ok, 0u);
}

// The loopback backend copied a write that was queued at the target into the target's region
// even after the target had released it (freed memory: heap corruption, "free(): invalid
// pointer" at exit). The target now checks the destination against its live regions.
TEST_P(CoreRegressionTest, LoopbackWriteIntoARegionReleasedMeanwhileFails) {
    if (GetParam().backend != BackendKind::Loopback) {
        GTEST_SKIP() << "UCX: see AmWriteIntoAReleasedRegionFailsAndTheTargetSurvives";
    }
    auto a = make("a"), b = make("b", ProgressMode::EventFd);  // b runs nothing until told
    ReleasablePair p;
    ASSERT_NO_FATAL_FAILURE(connect_releasable(*a, *b, p));
    const BlockId ids[] = {1};
    auto h = a->write_blocks(make_req(p.pb, p.la, ids, p.lb, ids, 8, Clock::now() + 5s));
    ASSERT_TRUE(h) << h.message();
    EXPECT_EQ(a->poll(*h), Status::InProgress);  // queued at b
    ASSERT_TRUE(b->release_region(p.region));
    ASSERT_TRUE(eventually([&] { return is_terminal(a->poll(*h)); }, {b.get()}));
    EXPECT_EQ(a->poll(*h), Status::Failed);
    auto r = a->result(*h);
    ASSERT_TRUE(r);
    EXPECT_NE(r->message.find("not in a live region"), std::string::npos) << r->message;
    auto again = b->allocate_region(kBlock * kBlocks);  // b's heap still sound
    EXPECT_TRUE(again) << again.message();
}

INSTANTIATE_TEST_SUITE_P(Backends, CoreRegressionTest, backend_params(), backend_label);

}  // namespace
}  // namespace pdx::test
