// Posting and event-order tests of the agent core: large requests handed to the progress context
// (chunked), cancel/deadline/peer-gone while queued, and the order in which a UCX progress round
// reports received messages and connection errors.
#include <gtest/gtest.h>

#include <cstring>
#include <thread>

#include "pdx/agent.hpp"
#include "tests/unit/transfer/eventually.hpp"
#include "tests/unit/transfer/helpers.hpp"

namespace pdx {
namespace {

using namespace std::chrono_literals;

constexpr std::uint64_t kBlock = 4096;
constexpr std::uint32_t kBlocks = 2048;  // 8 MiB: large enough to be queued and chunked

using pdx::test::eventually;

struct Param {
    const char* label;
    BackendKind backend;
    const char* transports;
};

class QueueTest : public ::testing::TestWithParam<Param> {
protected:
    void SetUp() override {
        if (GetParam().backend == BackendKind::Ucx && !ucx_available()) {
            GTEST_SKIP() << "no UCX";
        }
    }
    std::unique_ptr<Agent> make(const std::string& name, ProgressMode mode = ProgressMode::Thread,
                                std::chrono::milliseconds hb = 1000ms) {
        Config c;
        c.name = name;
        c.backend = GetParam().backend;
        c.transports = GetParam().transports;
        if (c.transports == std::string("tcp")) {
            c.net_devices = "lo";
        }
        c.progress = mode;
        c.heartbeat_interval = hb;
        c.peer_timeout = 10 * hb;
        auto a = Agent::create(c);
        EXPECT_TRUE(a) << a.message();
        return a ? std::move(*a) : nullptr;
    }
    static std::pair<RegionId, LayoutId> pool(Agent& a) {
        auto r = a.allocate_region(kBlock * kBlocks);
        EXPECT_TRUE(r) << r.message();
        auto l = a.add_layout(Layout{*r, 0, kBlock, 0, kBlocks});
        EXPECT_TRUE(l) << l.message();
        return {*r, *l};
    }
    // Adds each agent to the other and waits until a message went each way (UCX wire-up done;
    // UCX 1.13 asserts if a worker is destroyed with a tcp wire-up reply still queued).
    static PeerHandle link(Agent& a, Agent& b) {
        auto pb = a.add_peer(b.descriptor());
        auto pa = b.add_peer(a.descriptor());
        EXPECT_TRUE(pb && pa);
        Notification n;
        n.kind = NotifyKind::Register;
        EXPECT_TRUE(a.notify(*pb, n));
        EXPECT_TRUE(b.notify(*pa, n));
        bool ga = false, gb = false;
        EXPECT_TRUE(eventually(
            [&] {
                ga = ga || !a.drain_notifications().empty();
                gb = gb || !b.drain_notifications().empty();
                return ga && gb;
            },
            {&a, &b}));
        return *pb;
    }
    static TransferRequest req(PeerHandle p, LayoutId l, std::span<const BlockId> src,
                               std::span<const BlockId> dst, std::uint64_t id) {
        return pdx::test::make_req(p, l, src, l, dst, id);
    }
};

Notification note(NotifyKind kind, std::uint64_t id) {
    Notification n;
    n.kind = kind;
    n.transfer_id = id;
    n.expected = 1;
    return n;
}

// Every other block, so nothing merges: 1024 descriptors, several chunks.
std::vector<BlockId> scattered(std::uint32_t n) {
    std::vector<BlockId> v;
    for (std::uint32_t i = 0; i < n; ++i) {
        v.push_back(BlockId(2 * i));
    }
    return v;
}

TEST_P(QueueTest, LargeScatteredWriteIsChunkedAndDoneFollowsAllData) {
    auto a = make("a"), b = make("b");
    auto [ra, la] = pool(*a);
    auto [rb, lb] = pool(*b);
    auto mem = a->region_memory(ra);
    for (std::size_t i = 0; i < mem.size(); ++i) {
        mem[i] = std::byte(static_cast<std::uint8_t>(i * 7 + (i >> 12)));
    }
    PeerHandle pb = link(*a, *b);
    auto ids = scattered(1024);
    auto r = req(pb, la, ids, ids, 7);
    r.notify = note(NotifyKind::Done, 7);
    auto h = a->write_blocks(r);
    ASSERT_TRUE(h) << h.message();
    // a second, small request behind the queued one keeps FIFO order and completes too
    std::vector<BlockId> one = {1};
    auto h2 = a->write_blocks(req(pb, la, one, one, 8));
    ASSERT_TRUE(h2) << h2.message();
    EXPECT_EQ(a->wait(*h, 10s), Status::Ok);
    EXPECT_EQ(a->wait(*h2, 10s), Status::Ok);
    EXPECT_EQ(a->result(*h)->descriptors, 1024u);
    std::vector<ReceivedNotification> got;
    ASSERT_TRUE(eventually([&] {
        for (auto& n : b->drain_notifications()) {
            got.push_back(n);
        }
        return !got.empty();
    }));
    // the Done arrived: every block of the transfer must already be visible
    auto dst = b->region_memory(rb);
    for (BlockId id : ids) {
        ASSERT_EQ(std::memcmp(dst.data() + id * kBlock, mem.data() + id * kBlock, kBlock), 0)
            << "block " << id;
    }
    EXPECT_EQ(got[0].notification.kind, NotifyKind::Done);
    EXPECT_EQ(got[0].peer_name, "a");
}

TEST_P(QueueTest, LargeContiguousWriteIsOneDescriptorAndArrivesWhole) {
    auto a = make("a"), b = make("b");
    auto [ra, la] = pool(*a);
    auto [rb, lb] = pool(*b);
    auto mem = a->region_memory(ra);
    for (std::size_t i = 0; i < mem.size(); ++i) {
        mem[i] = std::byte(static_cast<std::uint8_t>(i * 13 + (i >> 20)));
    }
    PeerHandle pb = link(*a, *b);
    std::vector<BlockId> ids(kBlocks);
    for (BlockId i = 0; i < kBlocks; ++i) {
        ids[i] = kBlocks - 1 - i;  // reversed: still one 8 MiB run after sorting
    }
    auto h = a->write_blocks(req(pb, la, ids, ids, 12));
    ASSERT_TRUE(h) << h.message();
    EXPECT_EQ(a->wait(*h, 10s), Status::Ok);
    EXPECT_EQ(a->result(*h)->descriptors, 1u);
    EXPECT_EQ(a->result(*h)->bytes, kBlock * kBlocks);
    auto dst = b->region_memory(rb);
    EXPECT_EQ(std::memcmp(dst.data(), mem.data(), mem.size()), 0);
    (void)lb;
}

TEST_P(QueueTest, CanceledWhileQueuedEndsOnceAndReleasesTheRegion) {
    // EventFd initiator: nothing posts the queued chunks until we progress.
    auto a = make("a", ProgressMode::EventFd), b = make("b");
    auto [ra, la] = pool(*a);
    pool(*b);
    PeerHandle pb = link(*a, *b);
    auto ids = scattered(1024);
    int calls = 0;
    auto r = req(pb, la, ids, ids, 9);
    r.on_complete = [&](const TransferResult& res) {
        ++calls;
        EXPECT_EQ(res.status, Status::Canceled);
    };
    auto h = a->write_blocks(r);
    ASSERT_TRUE(h) << h.message();
    EXPECT_EQ(a->poll(*h), Status::InProgress);
    EXPECT_EQ(a->release_region(ra).status(), Status::Busy);
    ASSERT_TRUE(a->cancel(*h));
    EXPECT_EQ(a->poll(*h), Status::Canceled);
    EXPECT_TRUE(eventually([&] { return calls == 1; }, {a.get()}));
    // nothing of the transfer is left referencing the region
    EXPECT_TRUE(eventually([&] { return a->release_region(ra).ok(); }, {a.get()}));
    EXPECT_EQ(calls, 1);
    EXPECT_EQ(a->stats().transfers_canceled, 1u);
}

TEST_P(QueueTest, ExpiredWhileQueuedSendsFailedNotOk) {
    auto a = make("a", ProgressMode::EventFd), b = make("b");
    auto [ra, la] = pool(*a);
    pool(*b);
    PeerHandle pb = link(*a, *b);
    auto ids = scattered(1024);
    auto r = req(pb, la, ids, ids, 11);
    r.deadline = Clock::now() - 1ms;  // already past: expires on the first progress round
    r.notify = note(NotifyKind::Done, 11);
    auto h = a->write_blocks(r);
    ASSERT_TRUE(h) << h.message();
    EXPECT_EQ(a->wait(*h, 5s), Status::Expired);
    std::vector<ReceivedNotification> got;
    ASSERT_TRUE(eventually(
        [&] {
            for (auto& n : b->drain_notifications()) {
                got.push_back(n);
            }
            return !got.empty();
        },
        {a.get()}));
    EXPECT_EQ(got[0].notification.kind, NotifyKind::Failed);
    EXPECT_EQ(got[0].notification.status, Status::Expired);
    EXPECT_TRUE(eventually([&] { return a->release_region(ra).ok(); }, {a.get()}));
}

INSTANTIATE_TEST_SUITE_P(Backends, QueueTest,
                         ::testing::Values(Param{"loopback", BackendKind::Loopback, ""},
                                           Param{"tcp", BackendKind::Ucx, "tcp"},
                                           Param{"shm", BackendKind::Ucx, "posix,self"}),
                         [](const auto& i) { return std::string(i.param.label); });

// A Done sent just before the sender exits arrives in the same UCX progress round as the
// endpoint error of its connection; it must still be attributed to the sender.
TEST(UcxEventOrder, MessageBeforeDisconnectIsAttributedToThePeer) {
    if (!ucx_available()) {
        GTEST_SKIP() << "no UCX";
    }
    for (int round = 0; round < 3; ++round) {
        Config c;
        c.transports = "tcp";
        c.net_devices = "lo";
        c.name = "receiver";
        c.progress = ProgressMode::EventFd;  // progressed only by this test
        auto a = std::move(*Agent::create(c));
        c.name = "sender";
        c.progress = ProgressMode::Thread;
        auto b = std::move(*Agent::create(c));
        PeerHandle pb = *a->add_peer(b->descriptor());
        PeerHandle pa = *b->add_peer(a->descriptor());
        ASSERT_TRUE(b->notify(pa, note(NotifyKind::Register, 1)));
        ASSERT_TRUE(eventually([&] { return !a->drain_notifications().empty(); }, {a.get()}));
        ASSERT_TRUE(a->notify(pb, note(NotifyKind::Register, 2)));
        ASSERT_TRUE(eventually([&] { return !b->drain_notifications().empty(); }, {a.get()}));
        // wire-up done both ways; now `a` stops progressing while `b` says Done and exits
        ASSERT_TRUE(b->notify(pa, note(NotifyKind::Done, 42)));
        b.reset();
        std::vector<ReceivedNotification> got;
        ASSERT_TRUE(eventually(
            [&] {
                for (auto& n : a->drain_notifications()) {
                    got.push_back(n);
                }
                return !got.empty();
            },
            {a.get()}));
        EXPECT_EQ(got[0].notification.kind, NotifyKind::Done);
        EXPECT_EQ(got[0].notification.transfer_id, 42u);
        EXPECT_EQ(got[0].peer, pb) << "round " << round;
        EXPECT_EQ(got[0].peer_name, "sender") << "round " << round;
    }
}

}  // namespace
}  // namespace pdx
