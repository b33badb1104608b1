// The agent API suite, run on every backend available in-process: loopback, UCX over tcp
// (127.0.0.1) and UCX over shared memory. Multi-process UCX tests live in tests/transfer.
// Long: every case runs on every backend through one parameterised fixture.
#include <gtest/gtest.h>
#include <poll.h>

#include <atomic>
#include <cstring>
#include <mutex>
#include <thread>

#include "pdx/agent.hpp"
#include "tests/unit/transfer/eventually.hpp"
#include "tests/unit/transfer/helpers.hpp"

namespace pdx {
namespace {

using namespace std::chrono_literals;

struct Param {
    const char* label;
    BackendKind backend;
    const char* transports;
    bool target_must_progress;  // a non-progressing target stalls transfers
};

constexpr std::uint64_t kBlock = 4096;
constexpr std::uint32_t kBlocks = 32;

void fill(std::span<std::byte> b, std::uint32_t seed) {
    for (std::size_t i = 0; i < b.size(); ++i) {
        b[i] = std::byte(static_cast<std::uint8_t>((seed * 131u) ^ (i * 7u) ^ (i >> 8)));
    }
}
bool matches(std::span<const std::byte> b, std::uint32_t seed) {
    for (std::size_t i = 0; i < b.size(); ++i) {
        if (b[i] != std::byte(static_cast<std::uint8_t>((seed * 131u) ^ (i * 7u) ^ (i >> 8)))) {
            return false;
        }
    }
    return true;
}

using pdx::test::eventually;

using pdx::test::make_req;

class AgentTest : public ::testing::TestWithParam<Param> {
protected:
    std::unique_ptr<Agent> make(const std::string& name, ProgressMode mode = ProgressMode::Thread,
                                std::chrono::milliseconds hb = 1000ms) {
        Config c = test::agent_config(name, GetParam().backend, GetParam().transports, mode);
        c.latency_stats = latency_stats_;
        c.heartbeat_interval = hb;
        c.peer_timeout = 6 * hb;
        auto a = Agent::create(c);
        EXPECT_TRUE(a) << a.message();
        return a ? std::move(*a) : nullptr;
    }
    // Allocates kBlocks blocks of kBlock bytes in one region with one dense layout (id 0).
    static LayoutId pool(Agent& a) { return test::dense_pool(a, kBlock, kBlocks); }
    static PeerHandle connect(Agent& from, Agent& to) { return test::connect_peer(from, to); }
    // Both sides connected and each has heard the other (wire-up done), driving EventFd agents.
    static void settle(Agent& a, PeerHandle pb, Agent& b, PeerHandle pa) {
        ASSERT_TRUE(eventually(
            [&] {
                return a.peer_info(pb)->ms_since_heard >= 0 && b.peer_info(pa)->ms_since_heard >= 0;
            },
            {&a, &b}));
    }
    bool latency_stats_ = true;  // Config::latency_stats of the agents make() creates
    void SetUp() override {
        if (GetParam().backend == BackendKind::Ucx && !ucx_available()) {
            GTEST_SKIP() << "no UCX";
        }
    }
};

TEST_P(AgentTest, WritesUnorderedBlocksMergedAndVerifiesBytes) {
    auto a = make("a"), b = make("b");
    LayoutId la = pool(*a), lb = pool(*b);
    PeerHandle pb = connect(*a, *b);
    connect(*b, *a);
    for (BlockId i = 0; i < kBlocks; ++i) {
        fill(a->block(la, i), 1000 + i);
    }
    std::vector<BlockId> src = {5, 3, 4, 0, 1, 2, 9, 3};
    std::vector<BlockId> dst = {15, 13, 14, 10, 11, 12, 1, 13};
    std::atomic<int> calls{0};
    TransferRequest rq = make_req(pb, la, src, lb, dst, 77);
    rq.on_complete = [&](const TransferResult& r) {
        EXPECT_EQ(r.status, Status::Ok);
        EXPECT_EQ(r.transfer_id, 77u);
        ++calls;
    };
    auto h = a->write_blocks(rq);
    ASSERT_TRUE(h) << h.message();
    EXPECT_EQ(a->wait(*h, 5s), Status::Ok);
    ASSERT_TRUE(eventually([&] { return calls.load() == 1; }));
    auto res = a->result(*h);
    ASSERT_TRUE(res);
    EXPECT_EQ(res->descriptors, 2u);  // 0..5 -> 10..15 and 9 -> 1
    EXPECT_EQ(res->bytes, 7 * kBlock);
    for (std::size_t i = 0; i < src.size(); ++i) {
        EXPECT_TRUE(matches(b->block(lb, dst[i]), 1000 + src[i])) << "dst " << dst[i];
    }
    auto s = a->stats();
    EXPECT_EQ(s.transfers_ok, 1u);
    EXPECT_EQ(s.bytes_written, 7 * kBlock);
    EXPECT_EQ(s.descriptors_posted, 2u);
    EXPECT_EQ(s.blocks_requested, 8u);
    EXPECT_EQ(s.completion.count, 1u);
    std::this_thread::sleep_for(20ms);
    EXPECT_EQ(calls.load(), 1);  // exactly one terminal callback
}

TEST_P(AgentTest, ReadsBlocksFromPeer) {
    auto a = make("a"), b = make("b");
    LayoutId la = pool(*a), lb = pool(*b);
    connect(*a, *b);
    PeerHandle pa = connect(*b, *a);
    for (BlockId i = 0; i < kBlocks; ++i) {
        fill(a->block(la, i), 7 * i + 1);
    }
    std::vector<BlockId> local = {20, 21, 22, 3}, remote = {2, 3, 4, 31};
    auto h = b->read_blocks(make_req(pa, lb, local, la, remote, 5));
    ASSERT_TRUE(h) << h.message();
    EXPECT_EQ(b->wait(*h, 5s), Status::Ok);
    for (std::size_t i = 0; i < local.size(); ++i) {
        EXPECT_TRUE(matches(b->block(lb, local[i]), 7 * remote[i] + 1));
    }
    EXPECT_EQ(b->stats().bytes_read, 4 * kBlock);
    EXPECT_EQ(b->result(*h)->descriptors, 2u);
}

TEST_P(AgentTest, RegisteredCallerMemoryWorks) {
    auto a = make("a"), b = make("b");
    std::vector<std::byte> mine(kBlock * 4);
    auto r = a->register_region(mine.data(), mine.size());
    ASSERT_TRUE(r) << r.message();
    auto la = a->add_layout(Layout{*r, 0, kBlock, 0, 4});
    ASSERT_TRUE(la);
    LayoutId lb = pool(*b);
    PeerHandle pb = connect(*a, *b);
    connect(*b, *a);
    fill(std::span(mine).subspan(kBlock, kBlock), 42);
    std::vector<BlockId> s = {1}, d = {30};
    auto h = a->write_blocks(make_req(pb, *la, s, lb, d, 1));
    ASSERT_TRUE(h) << h.message();
    EXPECT_EQ(a->wait(*h, 5s), Status::Ok);
    EXPECT_TRUE(matches(b->block(lb, 30), 42));
}

TEST_P(AgentTest, RefusesBadRequestsWithClearStatus) {
    Config small;
    auto a = make("a"), b = make("b");
    LayoutId la = pool(*a), lb = pool(*b);
    PeerHandle pb = connect(*a, *b);
    std::vector<BlockId> none, one = {1}, two = {1, 2}, out = {kBlocks};
    auto check = [&](std::span<const BlockId> l, std::span<const BlockId> r, const char* what,
                     LayoutId ll = 0, LayoutId rl = 0) {
        auto h = a->write_blocks(make_req(pb, ll, l, rl, r, 9));
        EXPECT_FALSE(h);
        EXPECT_EQ(h.status(), Status::Invalid) << what;
        EXPECT_NE(h.message().find(what), std::string::npos) << h.message();
    };
    check(none, none, "empty");
    check(one, two, "mismatched");
    check(out, one, "out of range");
    check(one, out, "out of range");
    check(one, one, "unknown local layout", la + 5, lb);
    check(one, one, "unknown remote layout", la, lb + 5);
    std::vector<BlockId> many(2'000'000, 0);
    check(many, many, "oversize");
    auto r = a->read_blocks(make_req(pb, la, none, lb, none, 1));
    EXPECT_EQ(r.status(), Status::Invalid);
    EXPECT_EQ(a->write_blocks(make_req(pb + 100, la, one, lb, one, 1)).status(), Status::NotFound);
    EXPECT_GE(a->stats().transfers_refused, 8u);
    EXPECT_EQ(a->stats().transfers_posted, 0u);
    EXPECT_FALSE(a->add_peer(a->descriptor()));  // own descriptor
    auto blob = b->descriptor();
    blob.resize(blob.size() / 2);
    EXPECT_EQ(a->add_peer(blob).status(), Status::Invalid);
    EXPECT_FALSE(a->add_layout(Layout{0, 0, kBlock, 0, kBlocks + 1}));
}

TEST_P(AgentTest, DoneNotificationArrivesAfterDataIsVisible) {
    auto a = make("a"), b = make("b");
    LayoutId la = pool(*a), lb = pool(*b);
    PeerHandle pb = connect(*a, *b);
    connect(*b, *a);
    for (BlockId i = 0; i < kBlocks; ++i) {
        fill(a->block(la, i), 500 + i);
    }
    std::mutex mu;
    std::vector<ReceivedNotification> got;
    bool data_ok_at_done = false;
    b->set_notification_handler([&](const ReceivedNotification& n) {
        std::lock_guard lk(mu);
        if (n.notification.kind == NotifyKind::Done) {
            data_ok_at_done = true;
            for (BlockId i = 0; i < 8; ++i) {
                data_ok_at_done = data_ok_at_done && matches(b->block(lb, 24 + i), 500 + i);
            }
        }
        got.push_back(n);
    });
    std::vector<BlockId> src = {0, 1, 2, 3, 4, 5, 6, 7}, dst = {24, 25, 26, 27, 28, 29, 30, 31};
    TransferRequest rq = make_req(pb, la, src, lb, dst, 1234);
    rq.notify = Notification{NotifyKind::Done, 1234, 0, 1, Status::Ok, "req-1"};
    auto h = a->write_blocks(rq);
    ASSERT_TRUE(h) << h.message();
    EXPECT_EQ(a->wait(*h, 5s), Status::Ok);
    ASSERT_TRUE(eventually([&] {
        std::lock_guard lk(mu);
        return !got.empty();
    }));
    std::lock_guard lk(mu);
    EXPECT_TRUE(data_ok_at_done);
    EXPECT_EQ(got[0].notification.transfer_id, 1234u);
    EXPECT_EQ(got[0].notification.expected, 1u);
    EXPECT_EQ(got[0].notification.payload, "req-1");
    EXPECT_EQ(got[0].peer_name, "a");
    EXPECT_EQ(got[0].sender_instance, a->instance());
}

TEST_P(AgentTest, TypedNotificationsRoundTrip) {
    auto a = make("a"), b = make("b");
    PeerHandle pb = connect(*a, *b);
    PeerHandle pa = connect(*b, *a);
    for (NotifyKind k :
         {NotifyKind::Register, NotifyKind::Failed, NotifyKind::Abort, NotifyKind::Heartbeat}) {
        Notification n{k, 40 + static_cast<std::uint64_t>(k), 2, 3, Status::Failed, "payload"};
        ASSERT_TRUE(a->notify(pb, n));
    }
    std::vector<ReceivedNotification> got;
    ASSERT_TRUE(eventually([&] {
        for (auto& n : b->drain_notifications()) {
            got.push_back(n);
        }
        return got.size() >= 4;
    }));
    ASSERT_EQ(got.size(), 4u);  // the core's own heartbeats are not delivered
    EXPECT_EQ(got[0].notification.kind, NotifyKind::Register);
    EXPECT_EQ(got[3].notification.kind, NotifyKind::Heartbeat);
    EXPECT_EQ(got[1].notification.transfer_id, 42u);
    EXPECT_EQ(got[1].notification.status, Status::Failed);
    EXPECT_EQ(got[1].peer, pa);
    Notification big{
        NotifyKind::Register, 1, 0, 0, Status::Ok, std::string(kMaxNotifyPayload + 1, 'x')};
    EXPECT_EQ(a->notify(pb, big).status(), Status::Invalid);
}

TEST_P(AgentTest, DeadlineExpiresAndFailedIsNotified) {
    if (!GetParam().target_must_progress) {
        GTEST_SKIP() << "transport completes without target";
    }
    auto a = make("a");
    auto b = make("b", ProgressMode::EventFd);  // never progressed while the write is pending
    LayoutId la = pool(*a), lb = pool(*b);
    PeerHandle pb = connect(*a, *b);
    PeerHandle pa = connect(*b, *a);
    settle(*a, pb, *b, pa);
    std::atomic<int> calls{0};
    std::vector<BlockId> ids = {1, 2};
    TransferRequest rq = make_req(pb, la, ids, lb, ids, 99, Clock::now() + 150ms);
    rq.notify = Notification{NotifyKind::Done, 99, 0, 1, Status::Ok, {}};
    rq.on_complete = [&](const TransferResult& r) {
        EXPECT_EQ(r.status, Status::Expired);
        ++calls;
    };
    auto t0 = Clock::now();
    auto h = a->write_blocks(rq);
    ASSERT_TRUE(h) << h.message();
    EXPECT_EQ(a->wait(*h, 5s), Status::Expired);
    EXPECT_LT(Clock::now() - t0, 2s);
    ASSERT_TRUE(eventually([&] { return calls.load() == 1; }));
    // the target now learns that transfer 99 failed (never a silent wait)
    std::vector<ReceivedNotification> got;
    ASSERT_TRUE(eventually(
        [&] {
            for (auto& n : b->drain_notifications()) {
                got.push_back(n);
            }
            return !got.empty();
        },
        {b.get()}));
    EXPECT_EQ(got[0].notification.kind, NotifyKind::Failed);
    EXPECT_EQ(got[0].notification.transfer_id, 99u);
    EXPECT_EQ(got[0].notification.status, Status::Expired);
    EXPECT_EQ(a->poll(*h), Status::Expired);  // late completion does not change it
    EXPECT_EQ(calls.load(), 1);
    EXPECT_EQ(a->stats().transfers_expired, 1u);
}

TEST_P(AgentTest, CancelEndsTransferOnce) {
    if (!GetParam().target_must_progress) {
        GTEST_SKIP() << "transport completes without target";
    }
    auto a = make("a");
    auto b = make("b", ProgressMode::EventFd);
    LayoutId la = pool(*a), lb = pool(*b);
    PeerHandle pb = connect(*a, *b);
    PeerHandle pa = connect(*b, *a);
    settle(*a, pb, *b, pa);
    std::atomic<int> calls{0};
    std::vector<BlockId> ids = {3};
    TransferRequest rq = make_req(pb, la, ids, lb, ids, 5);
    rq.on_complete = [&](const TransferResult& r) {
        EXPECT_EQ(r.status, Status::Canceled);
        ++calls;
    };
    auto h = a->write_blocks(rq);
    ASSERT_TRUE(h);
    EXPECT_EQ(a->poll(*h), Status::InProgress);
    ASSERT_TRUE(a->cancel(*h));
    EXPECT_EQ(a->poll(*h), Status::Canceled);
    ASSERT_TRUE(eventually([&] { return calls.load() == 1; }, {b.get()}));
    auto again = a->cancel(*h);  // a terminal transfer: refused, and it says so
    EXPECT_EQ(again.status(), Status::Invalid);
    EXPECT_NE(again.message().find("already ended: canceled"), std::string::npos)
        << again.message();
    for (int i = 0; i < 20; ++i) {
        b->progress();
    }
    std::this_thread::sleep_for(30ms);
    EXPECT_EQ(a->poll(*h), Status::Canceled);
    EXPECT_EQ(calls.load(), 1);
    EXPECT_EQ(a->cancel(987654).status(), Status::NotFound);
}

TEST_P(AgentTest, DestroyedPeerEndsInFlightWithPeerGone) {
    if (!GetParam().target_must_progress) {
        GTEST_SKIP() << "transport completes without target";
    }
    auto a = make("a", ProgressMode::Thread, 100ms);
    auto b = make("b", ProgressMode::EventFd, 100ms);
    LayoutId la = pool(*a), lb = pool(*b);
    PeerHandle pb = connect(*a, *b);
    PeerHandle pa = connect(*b, *a);
    settle(*a, pb, *b, pa);
    std::vector<TransferHandle> hs;
    for (BlockId i = 0; i < 4; ++i) {
        std::vector<BlockId> ids = {i};
        auto h = a->write_blocks(make_req(pb, la, ids, lb, ids, i));
        ASSERT_TRUE(h);
        hs.push_back(*h);
    }
    auto t0 = Clock::now();
    b.reset();
    for (auto h : hs) {
        EXPECT_EQ(a->wait(h, 5s), Status::PeerGone);
    }
    EXPECT_LT(Clock::now() - t0, 5s);
    std::vector<BlockId> ids = {1};
    EXPECT_EQ(a->write_blocks(make_req(pb, la, ids, lb, ids, 1)).status(), Status::PeerGone);
    EXPECT_FALSE(a->peer_info(pb)->alive);
    EXPECT_EQ(a->stats().transfers_peer_gone, 4u);
}

TEST_P(AgentTest, SilentPeerIsDeclaredGoneByHeartbeats) {
    auto a = make("a", ProgressMode::Thread, 50ms);
    auto b = make("b", ProgressMode::EventFd, 50ms);
    pool(*a);
    pool(*b);
    PeerHandle pb = connect(*a, *b);
    connect(*b, *a);
    // liveness applies once a peer has been heard from
    ASSERT_TRUE(eventually([&] { return a->peer_info(pb)->ms_since_heard >= 0; }, {b.get()}));
    b->progress();  // now b goes silent
    auto t0 = Clock::now();
    ASSERT_TRUE(eventually([&] { return !a->peer_info(pb)->alive; }, {}, 3s));
    EXPECT_GE(Clock::now() - t0, 150ms);
    EXPECT_EQ(a->stats().peers_gone, 1u);
}

TEST_P(AgentTest, RestartedPeerIsANewGenerationAndOldHandleIsRefused) {
    auto a = make("a"), b1 = make("b");
    LayoutId la = pool(*a), lb = pool(*b1);
    auto blob1 = b1->descriptor();
    PeerHandle h1 = connect(*a, *b1);
    EXPECT_EQ(*a->add_peer(blob1), h1);  // idempotent
    EXPECT_EQ(a->peer_info(h1)->generation, 1u);
    b1.reset();
    auto b2 = make("b");
    pool(*b2);
    PeerHandle h2 = connect(*a, *b2);
    connect(*b2, *a);
    EXPECT_NE(h1, h2);
    EXPECT_EQ(a->peer_info(h2)->generation, 2u);
    std::vector<BlockId> ids = {0};
    auto stale = a->write_blocks(make_req(h1, la, ids, lb, ids, 1));
    EXPECT_EQ(stale.status(), Status::NotFound);
    EXPECT_NE(stale.message().find("stale"), std::string::npos) << stale.message();
    EXPECT_EQ(a->notify(h1, Notification{}).status(), Status::NotFound);
    auto ok = a->write_blocks(make_req(h2, la, ids, lb, ids, 1));
    ASSERT_TRUE(ok) << ok.message();
    EXPECT_EQ(a->wait(*ok, 5s), Status::Ok);
    EXPECT_TRUE(a->remove_peer(h2));
    EXPECT_EQ(a->write_blocks(make_req(h2, la, ids, lb, ids, 1)).status(), Status::NotFound);
}

TEST_P(AgentTest, LeasesPinBlocksAndExpireInFullSweep) {
    auto a = make("a");
    LayoutId la = pool(*a);
    std::vector<BlockId> x = {1, 2}, y = {3}, z = {2, 4};
    ASSERT_TRUE(a->lease(10, la, x, 1h));
    ASSERT_TRUE(a->lease(11, la, y, 30ms));
    ASSERT_TRUE(a->lease(12, la, z, 30ms));
    EXPECT_TRUE(a->is_leased(la, 2));
    EXPECT_EQ(a->release_region(0).status(), Status::Busy);
    std::vector<BlockId> bad = {kBlocks};
    EXPECT_EQ(a->lease(13, la, bad, 1s).status(), Status::Invalid);
    std::vector<std::uint64_t> expired;
    ASSERT_TRUE(eventually([&] {
        for (auto id : a->expire_leases()) {
            expired.push_back(id);
        }
        return expired.size() >= 2;
    }));
    std::sort(expired.begin(), expired.end());
    EXPECT_EQ(expired, (std::vector<std::uint64_t>{11, 12}));
    EXPECT_TRUE(a->is_leased(la, 2));
    EXPECT_FALSE(a->is_leased(la, 4));
    ASSERT_TRUE(a->renew(10, 1h));
    std::vector<std::uint64_t> ids = {10, 11};
    EXPECT_EQ(a->renew(ids, 1h), 1u);
    ASSERT_TRUE(a->release(10));
    EXPECT_EQ(a->release(10).status(), Status::NotFound);
    EXPECT_FALSE(a->is_leased(la, 1));
    EXPECT_TRUE(a->release_region(0));
    EXPECT_TRUE(a->block(la, 0).empty());
    EXPECT_GE(a->stats().leases_expired, 2u);
}

TEST_P(AgentTest, EventFdModeCompletesFromAPollLoop) {
    auto a = make("a", ProgressMode::EventFd);
    auto b = make("b");
    ASSERT_GE(a->event_fd(), 0);
    LayoutId la = pool(*a), lb = pool(*b);
    PeerHandle pb = connect(*a, *b);
    connect(*b, *a);
    fill(a->block(la, 6), 66);
    std::atomic<bool> done{false};
    std::vector<BlockId> s = {6}, d = {7};
    TransferRequest rq = make_req(pb, la, s, lb, d, 3);
    rq.on_complete = [&](const TransferResult& r) { done = r.status == Status::Ok; };
    ASSERT_TRUE(a->write_blocks(rq));
    auto until = Clock::now() + 5s;
    while (!done && Clock::now() < until) {
        a->progress();
        if (a->arm()) {
            pollfd p{a->event_fd(), POLLIN, 0};
            ::poll(&p, 1, 100);
        }
    }
    EXPECT_TRUE(done);
    EXPECT_TRUE(matches(b->block(lb, 7), 66));
}

// A caller that only busy-polls progress() + poll() (never arm(), never waits on the fd), as
// `pdx_transfer_bench --progress poll` and ucx_perftest do: transfers complete (queued ones
// included: 32 KiB is queued over tcp), and deadlines still fire (ticks run from progress()).
TEST_P(AgentTest, EventFdBusyPollingWithoutArmCompletesTransfersAndDeadlines) {
    auto a = make("a", ProgressMode::EventFd);
    auto b = make("b", ProgressMode::EventFd);  // progressed by busy_wait below, or not at all
    LayoutId la = pool(*a), lb = pool(*b);
    PeerHandle pb = connect(*a, *b);
    connect(*b, *a);
    auto busy_wait = [&](TransferHandle h, bool drive_target) {
        const auto until = Clock::now() + 5s;
        Status s = a->poll(h);
        for (std::uint64_t round = 0; s == Status::InProgress && Clock::now() < until; ++round) {
            a->progress();
            if (drive_target) {
                b->progress();
            }
            s = a->poll(h);
        }
        return s;
    };
    std::vector<BlockId> src = {0, 1, 2, 3, 4, 5, 6, 7}, dst = {8, 9, 10, 11, 12, 13, 14, 15};
    for (std::uint32_t round = 0; round < 20; ++round) {
        for (std::size_t i = 0; i < src.size(); ++i) {
            fill(a->block(la, src[i]), round * 100 + src[i]);
        }
        auto h = a->write_blocks(make_req(pb, la, src, lb, dst, round + 1, Clock::now() + 5s));
        ASSERT_TRUE(h) << h.message();
        ASSERT_EQ(busy_wait(*h, true), Status::Ok) << "round " << round;
        for (std::size_t i = 0; i < src.size(); ++i) {
            ASSERT_TRUE(matches(b->block(lb, dst[i]), round * 100 + src[i])) << "dst " << dst[i];
        }
    }
    EXPECT_EQ(a->stats().transfers_ok, 20u);
    if (!GetParam().target_must_progress) {
        return;
    }
    // b no longer progresses: the write stalls and its 100 ms deadline must end it
    std::vector<BlockId> big(kBlocks / 2), far(kBlocks / 2);
    for (BlockId i = 0; i < kBlocks / 2; ++i) {
        big[i] = i, far[i] = kBlocks / 2 + i;
    }
    const auto t0 = Clock::now();
    auto h = a->write_blocks(make_req(pb, la, big, lb, far, 99, t0 + 100ms));
    ASSERT_TRUE(h) << h.message();
    EXPECT_EQ(busy_wait(*h, false), Status::Expired);
    EXPECT_LT(Clock::now() - t0, 2s);
}

TEST_P(AgentTest, LatencyStatsCanBeTurnedOff) {
    for (bool on : {true, false}) {
        latency_stats_ = on;
        auto a = make("a"), b = make("b");
        LayoutId la = pool(*a), lb = pool(*b);
        PeerHandle pb = connect(*a, *b);
        connect(*b, *a);
        std::vector<BlockId> s = {1}, d = {2};
        for (std::uint64_t id = 1; id <= 3; ++id) {
            // with and without an explicit deadline (the default one needs the clock)
            auto h = a->write_blocks(
                make_req(pb, la, s, lb, d, id, id == 1 ? Clock::time_point{} : Clock::now() + 5s));
            ASSERT_TRUE(h) << h.message();
            ASSERT_EQ(a->wait(*h, 5s), Status::Ok);
        }
        auto st = a->stats();
        EXPECT_EQ(st.transfers_ok, 3u);
        EXPECT_EQ(st.bytes_written, 3 * kBlock);
        EXPECT_EQ(st.post.count, on ? 3u : 0u) << "latency_stats " << on;
        EXPECT_EQ(st.completion.count, on ? 3u : 0u) << "latency_stats " << on;
        EXPECT_EQ(st.post.total_ns > 0, on);
        EXPECT_LT(st.completion.mean_us(), 5e6);  // converted ticks, not garbage
        EXPECT_LE(st.post.max_ns, st.post.total_ns);
    }
}

// poll() answers finished transfers without the agent's lock; it must still answer exactly what
// result() (the history) does: Ok while the result is kept, NotFound once it is pushed out.
TEST_P(AgentTest, PollAgreesWithTheHistoryAsResultsArePushedOut) {
    for (std::size_t kept : {1u, 3u, 5u}) {
        Config c = test::agent_config("a", GetParam().backend, GetParam().transports,
                                      ProgressMode::Thread);
        c.completed_history = kept;
        auto made = Agent::create(c);
        ASSERT_TRUE(made) << made.message();
        auto a = std::move(*made);
        auto b = make("b");
        LayoutId la = pool(*a), lb = pool(*b);
        PeerHandle pb = connect(*a, *b);
        connect(*b, *a);
        std::vector<BlockId> s = {1}, d = {2};
        std::vector<TransferHandle> handles;
        for (std::uint64_t id = 1; id <= 12; ++id) {
            auto h = a->write_blocks(make_req(pb, la, s, lb, d, id, Clock::now() + 5s));
            ASSERT_TRUE(h) << h.message();
            ASSERT_EQ(a->wait(*h, 5s), Status::Ok);
            handles.push_back(*h);
            for (std::size_t i = 0; i < handles.size(); ++i) {
                const bool want_kept = i + kept >= handles.size();  // the newest `kept`
                auto r = a->result(handles[i]);
                EXPECT_EQ(r.ok(), want_kept) << "kept " << kept << " handle " << handles[i];
                EXPECT_EQ(a->poll(handles[i]), want_kept ? Status::Ok : Status::NotFound)
                    << "kept " << kept << " handle " << handles[i] << " after " << *h;
            }
        }
        EXPECT_EQ(a->poll(kNoTransfer), Status::NotFound);
        EXPECT_EQ(a->poll(handles.back() + 1), Status::NotFound);  // never posted
    }
    if (!GetParam().target_must_progress) {
        return;
    }
    // Out of order: a transfer ends (canceled) first and is pushed out of the history by six
    // that end after it, while the one sharing its poll slot (4 slots for 5 kept results:
    // handles 4 apart) stays in flight to a target that never progresses.
    Config c =
        test::agent_config("a", GetParam().backend, GetParam().transports, ProgressMode::Thread);
    c.completed_history = 5;
    c.peer_timeout = 60s;  // the stuck target never answers heartbeats: not gone meanwhile
    auto made = Agent::create(c);
    ASSERT_TRUE(made) << made.message();
    auto a = std::move(*made);
    auto b = make("b", ProgressMode::EventFd), stuck = make("stuck", ProgressMode::EventFd);
    LayoutId la = pool(*a), lb = pool(*b);
    pool(*stuck);
    PeerHandle pb = connect(*a, *b), ps = connect(*a, *stuck);
    PeerHandle pa = connect(*b, *a), pa2 = connect(*stuck, *a);
    settle(*a, pb, *b, pa);
    settle(*a, ps, *stuck, pa2);
    std::vector<BlockId> ids = {3};
    std::vector<TransferHandle> h;
    for (std::uint64_t id = 0; id < 8; ++id) {
        auto posted =
            a->write_blocks(make_req(id == 5 ? ps : pb, la, ids, lb, ids, id, Clock::now() + 30s));
        ASSERT_TRUE(posted) << posted.message();
        h.push_back(*posted);
    }
    ASSERT_EQ(h[5], h[1] + 4);
    ASSERT_TRUE(a->cancel(h[1]));
    ASSERT_TRUE(eventually(
        [&] {  // six Ok after it, and the backend released it
            return a->stats().transfers_ok == 6 && !a->result(h[1]).ok();
        },
        {b.get()}));
    EXPECT_EQ(a->poll(h[1]), Status::NotFound);
    EXPECT_EQ(a->poll(h[5]), Status::InProgress);
    ASSERT_TRUE(a->cancel(h[5]));
}

TEST_P(AgentTest, DescriptorCanBeInspected) {
    auto a = make("inspect-me");
    pool(*a);
    auto s = inspect_descriptor(a->descriptor());
    ASSERT_TRUE(s) << s.message();
    EXPECT_EQ(s->name, "inspect-me");
    EXPECT_EQ(s->instance, a->instance());
    EXPECT_EQ(s->layouts, 1u);
    EXPECT_EQ(s->backend, GetParam().backend);
}

// The data of a write landed but its Done notification could not be sent (the target went away
// in between): the write is Ok, says so in its message, and the refused send is counted.
// Loopback only: there the order is deterministic (the completion is queued before the
// connection error that the target's destruction queues).
TEST(AgentNotify, DoneThatCannotBeSentIsCountedAndReported) {
    auto make = [](const char* name) {
        auto a = Agent::create(
            test::agent_config(name, BackendKind::Loopback, "", ProgressMode::EventFd));
        EXPECT_TRUE(a) << a.message();
        return std::move(*a);
    };
    auto a = make("a");
    auto b = make("b");
    const LayoutId al = test::dense_pool(*a, 4096, 2), bl = test::dense_pool(*b, 4096, 2);
    const PeerHandle peer = test::connect_peer(*a, *b);
    const BlockId one[] = {1};
    TransferRequest w = test::make_req(peer, al, one, bl, one, 7);
    w.notify = Notification{NotifyKind::Done, 7, 0, 1, Status::Ok, "done"};
    auto h = a->write_blocks(w);
    ASSERT_TRUE(h) << h.message();
    b->progress();  // the target copies the data and queues the completion to a
    b.reset();      // then goes away: the Done has nowhere to go
    for (int i = 0; i < 1000 && a->poll(*h) == Status::InProgress; ++i) {
        a->progress();
    }
    ASSERT_EQ(a->poll(*h), Status::Ok);
    EXPECT_NE(a->result(*h)->message.find("notification not sent"), std::string::npos)
        << a->result(*h)->message;
    EXPECT_EQ(a->stats().notifications_failed, 1u);
    EXPECT_EQ(a->stats().notifications_sent, 0u);
}

INSTANTIATE_TEST_SUITE_P(Backends, AgentTest,
                         ::testing::Values(Param{"loopback", BackendKind::Loopback, "", true},
                                           Param{"ucx_tcp", BackendKind::Ucx, "tcp", true},
                                           Param{"ucx_shm", BackendKind::Ucx, "posix,self", false}),
                         [](const auto& tp) { return std::string(tp.param.label); });

}  // namespace
}  // namespace pdx
