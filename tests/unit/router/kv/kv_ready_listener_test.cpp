// KvReadyListener over real ZMQ sockets on 127.0.0.1: the test PUSHes notifications (as each
// prefill TP rank does) and garbage, and drives the router's io_context until a condition holds.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <list>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include <nlohmann/json.hpp>
#include <zmq.hpp>

#include "router/kv/kv_ready_forwarder.hpp"
#include "router/kv/kv_ready_listener.hpp"
#include "router/kv/kv_ready_owner.hpp"
#include "router/metrics/router_metrics.hpp"
#include "tests/mocks/run_until.hpp"
#include "tests/unit/router/metrics/series_value.hpp"

namespace pdr::kv {
namespace {

using ms = std::chrono::milliseconds;
using json = nlohmann::json;
using metrics::series_value;

std::string msgpack(const json& j) {
    const std::vector<std::uint8_t> bytes = json::to_msgpack(j);
    return std::string(bytes.begin(), bytes.end());
}

std::string notification(const std::string& id) {
    return msgpack(json{{"type", "ProxyNotif"}, {"req_id", id}});
}

// One wait, spawned as the flow's coroutine would run it: its result once it ended.
struct Waiting {
    std::optional<WaitEnd> end;
    Clock::time_point ended;
};

class KvReadyListenerTest : public ::testing::Test {
protected:
    KvReadyListenerTest() { opts.bind = "tcp://127.0.0.1:0"; }
    ~KvReadyListenerTest() override {
        if (listener) {
            listener->stop();
        }
        test::run_for(ioc, ms{10});
    }

    KvReadyListener& start() {
        listener = std::make_unique<KvReadyListener>(ioc.get_executor(), opts, rm);
        std::string error;
        started = listener->start(error);
        EXPECT_TRUE(started) << error;
        return *listener;
    }
    zmq::socket_t pusher() {
        zmq::socket_t s(zctx, zmq::socket_type::push);
        s.set(zmq::sockopt::linger, 0);
        s.connect(listener->endpoint());
        return s;
    }
    static void send(zmq::socket_t& s, const std::string& bytes) {
        ASSERT_TRUE(s.send(zmq::buffer(bytes), zmq::send_flags::none));
    }
    double notifications(const std::string& outcome) {
        return series_value(mreg, "pdrouter_kv_ready_notifications_total", {{"outcome", outcome}})
            .value_or(-1);
    }
    double malformed(const std::string& reason) {
        return series_value(mreg, "pdrouter_kv_ready_malformed_total", {{"reason", reason}})
            .value_or(-1);
    }
    double evictions(const std::string& reason) {
        return series_value(mreg, "pdrouter_kv_ready_evictions_total", {{"reason", reason}})
            .value_or(-1);
    }
    double pending() { return series_value(mreg, "pdrouter_kv_ready_pending").value_or(-1); }
    double disconnects() {
        return series_value(mreg, "pdrouter_kv_ready_disconnects_total").value_or(-1);
    }
    double refused(const std::string& reason) {
        return series_value(mreg, "pdrouter_kv_ready_refused_total", {{"reason", reason}})
            .value_or(-1);
    }
    template <class Pred>
    bool until(Pred pred, Duration limit = ms{5000}) {
        return test::run_until(ioc, pred, limit);
    }
    // Runs every handler that is ready now, without waiting for more.
    void settle() {
        ioc.restart();
        ioc.poll();
    }
    KvReadyListener::Registration& hold(KvReadyListener::Registration r) {
        return held.emplace_back(std::move(r));
    }
    std::shared_ptr<Waiting> spawn_wait(KvReadyListener::Registration& reg, Duration timeout,
                                        net::cancellation_slot slot = {}) {
        auto w = std::make_shared<Waiting>();
        net::co_spawn(ioc, reg.wait(Clock::now() + timeout),
                      net::bind_cancellation_slot(slot, [w](std::exception_ptr e, WaitEnd end) {
                          EXPECT_FALSE(e);
                          w->end = end;
                          w->ended = Clock::now();
                      }));
        return w;
    }

    // Outlives the io_context: a wait bound to it may end as the context goes.
    net::cancellation_signal client_gone;
    net::io_context ioc;
    metrics::Registry mreg;
    metrics::RouterMetrics rm{mreg};
    KvReadyOptions opts;
    zmq::context_t zctx{1};
    std::unique_ptr<KvReadyListener> listener;
    // Registrations a spawned wait refers to: they end after the destructor stopped the listener
    // and ran the waits to their end, whatever the test body did.
    std::list<KvReadyListener::Registration> held;
    bool started = false;
};

TEST_F(KvReadyListenerTest, StartReportsTheBoundEndpoint) {
    auto& l = start();
    ASSERT_TRUE(started);
    EXPECT_TRUE(l.endpoint().starts_with("tcp://127.0.0.1:")) << l.endpoint();
    EXPECT_NE(l.endpoint(), "tcp://127.0.0.1:0");
    std::string error;
    EXPECT_FALSE(l.start(error));
    EXPECT_NE(error.find("already started"), std::string::npos) << error;
}

TEST_F(KvReadyListenerTest, StartFailsWithAClearMessage) {
    auto& first = start();
    ASSERT_TRUE(started);
    struct Case {
        std::string bind, says;
    };
    const std::vector<Case> cases{
        {first.endpoint(), "Address already in use"},
        {"tcp://127.0.0.1:notaport", "cannot bind tcp://127.0.0.1:notaport"},
        {"tcp://no-such-interface-or-host.invalid:5557", "cannot bind"},
        {"udp://127.0.0.1:5557", "is not tcp://HOST:PORT"},
        {"", "is not tcp://HOST:PORT"},
    };
    for (const Case& c : cases) {
        KvReadyOptions o = opts;
        o.bind = c.bind;
        KvReadyListener other(ioc.get_executor(), o, rm);
        std::string error;
        EXPECT_FALSE(other.start(error)) << c.bind;
        EXPECT_NE(error.find(c.says), std::string::npos) << c.bind << ": " << error;
    }
}

TEST_F(KvReadyListenerTest, ReadyAfterExactlyNofNNotifications) {
    auto& l = start();
    auto rank0 = pusher();
    auto rank1 = pusher();
    auto& reg = hold(l.expect("req-a", 2));
    ASSERT_TRUE(reg.ok()) << reg.error();
    auto w = spawn_wait(reg, ms{10'000});
    settle();
    EXPECT_FALSE(w->end);
    send(rank0, notification("req-a"));
    ASSERT_TRUE(until([&] { return notifications("matched") == 1; }));
    settle();
    EXPECT_FALSE(w->end) << "ready after the first of 2 notifications";
    EXPECT_EQ(reg.received(), 1u);
    EXPECT_FALSE(reg.ready());
    send(rank1, notification("req-a"));
    ASSERT_TRUE(until([&] { return w->end.has_value(); }));
    EXPECT_EQ(*w->end, WaitEnd::Ready);
    EXPECT_EQ(reg.received(), 2u);
    EXPECT_EQ(notifications("matched"), 2);
    EXPECT_EQ(notifications("early"), 0);
    EXPECT_EQ(l.table().wakers().size(), 0u);
}

TEST_F(KvReadyListenerTest, EarlyNotificationsAreKept) {
    auto& l = start();
    auto rank0 = pusher();
    auto& reg = hold(l.expect("req-e", 1));
    ASSERT_TRUE(reg.ok());
    send(rank0, notification("req-e"));
    ASSERT_TRUE(until([&] { return notifications("early") == 1; }));
    EXPECT_TRUE(reg.ready());
    auto w = spawn_wait(reg, ms{10'000});
    settle();
    ASSERT_TRUE(w->end);
    EXPECT_EQ(*w->end, WaitEnd::Ready);
    EXPECT_EQ(notifications("matched"), 0);
}

TEST_F(KvReadyListenerTest, NotificationBeforeExpectIsClaimed) {
    auto& l = start();
    auto rank0 = pusher();
    send(rank0, notification("req-u"));
    ASSERT_TRUE(until([&] { return notifications("unknown") == 1; }));
    auto& reg = hold(l.expect("req-u", 1));
    ASSERT_TRUE(reg.ok());
    auto w = spawn_wait(reg, ms{10'000});
    settle();
    ASSERT_TRUE(w->end);
    EXPECT_EQ(*w->end, WaitEnd::Ready);
}

TEST_F(KvReadyListenerTest, TimesOutWithTheCountSoFar) {
    auto& l = start();
    auto rank0 = pusher();
    auto& reg = hold(l.expect("req-t", 2));
    const auto t0 = Clock::now();
    auto w = spawn_wait(reg, ms{150});
    send(rank0, notification("req-t"));
    ASSERT_TRUE(until([&] { return w->end.has_value(); }));
    EXPECT_EQ(*w->end, WaitEnd::TimedOut);
    EXPECT_GE(w->ended - t0, ms{150});
    EXPECT_EQ(reg.received(), 1u);
    EXPECT_EQ(l.table().wakers().size(), 0u);
}

// The flow's shape: the registration lives in the request's coroutine, which the server cancels
// through its slot when the client goes away.
awaitable<WaitEnd> lmcache_request(KvReadyListener& l, std::string id, bool total = false) {
    if (total) {  // a caller that lets every kind of cancellation through
        co_await net::this_coro::reset_cancellation_state(net::enable_total_cancellation());
    }
    auto reg = l.expect(std::move(id), 2);
    const WaitEnd end = co_await reg.wait(Clock::now() + ms{30'000});
    co_return end;
}

TEST_F(KvReadyListenerTest, CancellationEndsTheWaitAndRemovesTheWaiter) {
    auto& l = start();
    auto w = std::make_shared<Waiting>();
    net::co_spawn(
        ioc, lmcache_request(l, "req-c"),
        net::bind_cancellation_slot(client_gone.slot(), [w](std::exception_ptr e, WaitEnd end) {
            EXPECT_FALSE(e);
            w->end = end;
            w->ended = Clock::now();
        }));
    ASSERT_TRUE(until([&] { return l.table().wakers().size() == 1; }));
    EXPECT_EQ(l.table().state("req-c"), KvReadyTable::State::Waiting);
    const auto t0 = Clock::now();
    client_gone.emit(net::cancellation_type::terminal);
    ASSERT_TRUE(until([&] { return w->end.has_value(); }, ms{1000}));
    EXPECT_EQ(*w->end, WaitEnd::Cancelled);
    EXPECT_LT(w->ended - t0, ms{1000});
    EXPECT_EQ(l.table().wakers().size(), 0u);
    EXPECT_EQ(l.table().state("req-c"), KvReadyTable::State::Tombstone);
    auto rank0 = pusher();
    send(rank0, notification("req-c"));
    ASSERT_TRUE(until([&] { return notifications("duplicate") == 1; }));
    EXPECT_EQ(notifications("unknown"), 0);
}

TEST_F(KvReadyListenerTest, TotalCancellationEndsTheWaitToo) {
    auto& l = start();
    auto w = std::make_shared<Waiting>();
    net::co_spawn(
        ioc, lmcache_request(l, "req-total", true),
        net::bind_cancellation_slot(client_gone.slot(), [w](std::exception_ptr e, WaitEnd end) {
            EXPECT_FALSE(e);
            w->end = end;
        }));
    ASSERT_TRUE(until([&] { return l.table().wakers().size() == 1; }));
    client_gone.emit(net::cancellation_type::total);
    ASSERT_TRUE(until([&] { return w->end.has_value(); }, ms{1000}));
    EXPECT_EQ(*w->end, WaitEnd::Cancelled);
    EXPECT_EQ(l.table().state("req-total"), KvReadyTable::State::Tombstone);
}

TEST_F(KvReadyListenerTest, DuplicatesAreCountedNotReadied) {
    auto& l = start();
    auto rank0 = pusher();
    auto& reg = hold(l.expect("req-d", 1));
    auto w = spawn_wait(reg, ms{10'000});
    settle();
    for (int i = 0; i < 3; ++i) {
        send(rank0, notification("req-d"));
    }
    ASSERT_TRUE(until([&] { return notifications("duplicate") == 2; }));
    EXPECT_EQ(notifications("matched"), 1);
    // The waiter's completion is posted when the first one matches: when all three come in one
    // read (as under TSan), the duplicates are counted before it runs.
    ASSERT_TRUE(until([&] { return w->end.has_value(); }));
    EXPECT_EQ(*w->end, WaitEnd::Ready);
    EXPECT_EQ(reg.received(), 1u);
    reg.reset();
    // The request ended: a late one is a duplicate too, not unknown.
    send(rank0, notification("req-d"));
    ASSERT_TRUE(until([&] { return notifications("duplicate") == 3; }));
    EXPECT_EQ(notifications("unknown"), 0);
    EXPECT_EQ(pending(), 1);  // the tombstone
}

TEST_F(KvReadyListenerTest, UnclaimedNotificationsLeaveAfterTheTtl) {
    opts.ttl = ms{200};
    start();
    auto rank0 = pusher();
    send(rank0, notification("orphan"));
    ASSERT_TRUE(until([&] { return notifications("unknown") == 1; }));
    EXPECT_EQ(pending(), 1);
    const auto t0 = Clock::now();
    ASSERT_TRUE(until([&] { return evictions("ttl") == 1; }));
    EXPECT_GE(Clock::now() - t0, ms{150});
    EXPECT_EQ(pending(), 0);
    EXPECT_EQ(evictions("capacity"), 0);
}

TEST_F(KvReadyListenerTest, CapacityBoundsTheTable) {
    opts.max_pending = 4;
    auto& l = start();
    std::vector<KvReadyListener::Registration> regs;
    for (int i = 0; i < 4; ++i) {
        regs.push_back(l.expect("live-" + std::to_string(i), 1));
        ASSERT_TRUE(regs.back().ok());
    }
    auto refused = l.expect("one-too-many", 1);
    EXPECT_FALSE(refused.ok());
    EXPECT_EQ(refused.error(), "kv-ready table full");
    auto rank0 = pusher();
    send(rank0, notification("stranger"));
    ASSERT_TRUE(until([&] { return notifications("unknown") == 1; }));
    EXPECT_EQ(evictions("capacity"), 1);  // the new orphan was dropped
    EXPECT_EQ(pending(), 4);
    regs[0].reset();  // a tombstone now: the next registration may take its place
    auto again = l.expect("one-more", 1);
    EXPECT_TRUE(again.ok()) << again.error();
    EXPECT_EQ(evictions("capacity"), 2);
    EXPECT_EQ(pending(), 4);
}

TEST_F(KvReadyListenerTest, GarbageIsCountedByReasonAndNeverStopsTheListener) {
    auto& l = start();
    auto rank0 = pusher();
    send(rank0, std::string("\xc1 not msgpack at all"));
    send(rank0, "");
    send(rank0, msgpack(json::array({"ProxyNotif", "req-x"})));
    send(rank0, msgpack(json{{"type", "ProxyNotif"}}));
    send(rank0, msgpack(json{{"type", "ProxyNotif"}, {"req_id", 42}}));
    send(rank0, msgpack(json{{"req_id", ""}}));
    send(rank0, msgpack(json{{"req_id", std::string(300, 'x')}}));
    send(rank0, msgpack(json{{"req_id", "in-two-parts"}, {"pad", std::string(2000, 'p')}}));
    json nested = 1;  // 100 levels deep, past KvReadyFrame::kMaxDepth
    for (int i = 0; i < 100; ++i) {
        nested = json::array({nested});
    }
    send(rank0, msgpack(json{{"req_id", "deep"}, {"x", nested}}));
    ASSERT_TRUE(rank0.send(zmq::buffer(notification("multi")), zmq::send_flags::sndmore));
    send(rank0, notification("multi"));
    // Older LMCache: any map with a string req_id, other keys ignored.
    send(rank0, msgpack(json{{"req_id", "old-style"}, {"extra", json::array({1, 2})}}));
    ASSERT_TRUE(until([&] { return notifications("unknown") == 1; }));
    EXPECT_EQ(malformed("not_msgpack"), 3);  // garbage, empty, too deep
    EXPECT_EQ(malformed("not_map"), 1);
    EXPECT_EQ(malformed("no_req_id"), 3);
    EXPECT_EQ(malformed("id_too_long"), 1);
    EXPECT_EQ(malformed("too_large"), 1);
    EXPECT_EQ(malformed("multipart"), 1);
    EXPECT_EQ(notifications("malformed"), 10);
    EXPECT_EQ(l.table().state("old-style"), KvReadyTable::State::Orphan);
    EXPECT_FALSE(l.table().state("multi").has_value());

    // Past ZMQ_MAXMSGSIZE libzmq drops the peer: it counts as a disconnection (libzmq does not
    // say why), other peers go on, and the dropped peer's PUSH socket reconnects.
    auto rank1 = pusher();
    EXPECT_EQ(disconnects(), 0);
    send(rank0, std::string(KvReadyListener::kMaxMsgFactor * 1024 + 1, 'h'));
    send(rank1, notification("after-huge"));
    ASSERT_TRUE(until([&] { return notifications("unknown") == 2 && disconnects() == 1; }));
    EXPECT_EQ(notifications("malformed"), 10);
    bool recovered = false;
    for (int i = 0; i < 100 && !recovered; ++i) {  // messages sent while it reconnects may be lost
        send(rank0, notification("rank0-again"));
        recovered = until([&] { return l.table().state("rank0-again").has_value(); }, ms{100});
    }
    EXPECT_TRUE(recovered);
}

TEST_F(KvReadyListenerTest, FloodOfRandomIdsStaysWithinMaxPending) {
    opts.max_pending = 100;
    auto& l = start();
    constexpr int kCount = 5000;
    const std::string endpoint = l.endpoint();
    std::atomic<bool> sent{false};
    std::thread sender([&] {
        zmq::socket_t s(zctx, zmq::socket_type::push);
        s.connect(endpoint);
        std::mt19937 rng(7);
        for (int i = 0; i < kCount; ++i) {
            std::string id = std::to_string(i) + "-";
            const std::size_t len = rng() % 200;
            for (std::size_t c = 0; c < len; ++c) {
                id += static_cast<char>('a' + rng() % 26);
            }
            s.send(zmq::buffer(notification(id)), zmq::send_flags::none);
        }
        sent = true;
        s.set(zmq::sockopt::linger, 5000);  // deliver what is queued before closing
    });
    std::size_t largest = 0;
    const bool all = until(
        [&] {
            largest = std::max(largest, l.table().size());
            return notifications("unknown") == kCount;
        },
        ms{60'000});
    sender.join();
    EXPECT_TRUE(sent);
    ASSERT_TRUE(all) << notifications("unknown");
    EXPECT_LE(largest, 100u);
    EXPECT_EQ(pending(), 100);
    EXPECT_EQ(evictions("capacity"), kCount - 100);
}

// A flood of notifications for ids nobody registered (hostile review: 200k in 0.4 s) must not
// push out a registered request, nor the early notification of one: unknown ids go first, and
// every one of them is counted.
TEST_F(KvReadyListenerTest, AFloodOfUnknownIdsNeverPushesOutARegisteredRequest) {
    opts.max_pending = 100;
    auto& l = start();
    constexpr int kLive = 10;
    constexpr int kFlood = 20'000;
    for (int i = 0; i < kLive; ++i) {
        ASSERT_TRUE(hold(l.expect("live-" + std::to_string(i), 2)).ok());
    }
    auto rank0 = pusher();
    for (int i = 0; i < kLive / 2; ++i) {  // half of them got their first notification early
        send(rank0, notification("live-" + std::to_string(i)));
    }
    ASSERT_TRUE(until([&] { return notifications("early") == kLive / 2; }));
    const std::string endpoint = l.endpoint();
    std::thread flooder([&] {
        zmq::socket_t s(zctx, zmq::socket_type::push);
        s.connect(endpoint);
        for (int i = 0; i < kFlood; ++i) {
            s.send(zmq::buffer(notification("stranger-" + std::to_string(i))),
                   zmq::send_flags::none);
        }
        s.set(zmq::sockopt::linger, 5000);
    });
    const bool all = until([&] { return notifications("unknown") == kFlood; }, ms{60'000});
    flooder.join();
    ASSERT_TRUE(all) << notifications("unknown");
    EXPECT_EQ(pending(), 100);
    EXPECT_EQ(evictions("capacity"), kFlood - (100 - kLive));
    auto& reg = held.front();
    for (int i = 0; i < kLive; ++i) {
        const std::string id = "live-" + std::to_string(i);
        EXPECT_EQ(l.table().state(id), KvReadyTable::State::Registered) << id;
    }
    for (auto& r : held) {
        EXPECT_EQ(r.received(), r.req_id() < "live-5" ? 1u : 0u) << r.req_id();
    }
    // ... and every one of them still completes.
    for (int i = 0; i < kLive; ++i) {
        const std::string id = "live-" + std::to_string(i);
        send(rank0, notification(id));
        if (i >= kLive / 2) {
            send(rank0, notification(id));
        }
    }
    ASSERT_TRUE(until(
        [&] { return std::all_of(held.begin(), held.end(), [](auto& r) { return r.ready(); }); }));
    EXPECT_TRUE(reg.ready());
}

// The guard (kv_ready_guard.hpp) as ZAP asks it.
TEST(KvReadyGuard, JudgesAddressesAndKeys) {
    std::string error;
    auto open = KvReadyGuard::load({}, error);
    ASSERT_TRUE(open) << error;
    EXPECT_FALSE(open->active());
    EXPECT_EQ(open->judge("203.0.113.9", "NULL", ""), KvReadyGuard::Verdict::Allowed);

    auto listed = KvReadyGuard::load({.allow = {"10.0.0.0/8", "fd00::/8", "192.0.2.7"}}, error);
    ASSERT_TRUE(listed) << error;
    EXPECT_TRUE(listed->active());
    EXPECT_FALSE(listed->curve());
    EXPECT_EQ(listed->judge("10.1.2.3", "NULL", ""), KvReadyGuard::Verdict::Allowed);
    EXPECT_EQ(listed->judge("::ffff:10.1.2.3", "NULL", ""), KvReadyGuard::Verdict::Allowed);
    EXPECT_EQ(listed->judge("fd00::1", "NULL", ""), KvReadyGuard::Verdict::Allowed);
    EXPECT_EQ(listed->judge("192.0.2.7", "NULL", ""), KvReadyGuard::Verdict::Allowed);
    EXPECT_EQ(listed->judge("192.0.2.8", "NULL", ""), KvReadyGuard::Verdict::Address);
    EXPECT_EQ(listed->judge("::ffff:11.0.0.1", "NULL", ""), KvReadyGuard::Verdict::Address);
    EXPECT_EQ(listed->judge("", "NULL", ""), KvReadyGuard::Verdict::Address);
    EXPECT_EQ(listed->judge(std::string(100'000, '1'), "NULL", ""), KvReadyGuard::Verdict::Address);
}

// Key files written for one test, removed after it.
struct KeyFiles {
    KeyFiles() {
        dir = std::filesystem::temp_directory_path() /
              ("pdr_kv_ready_keys_" + std::to_string(::getpid()) + "_" +
               std::to_string(reinterpret_cast<std::uintptr_t>(this)));
        std::filesystem::create_directories(dir);
    }
    ~KeyFiles() { std::filesystem::remove_all(dir); }
    std::string write(const std::string& name, const std::string& text) {
        const auto p = dir / name;
        std::ofstream(p) << text;
        return p.string();
    }
    std::filesystem::path dir;
};

struct KeyPair {
    KeyPair() { EXPECT_EQ(zmq_curve_keypair(pub.data(), sec.data()), 0); }
    std::array<char, 41> pub{}, sec{};
};

TEST(KvReadyGuard, KeyFilesAreCheckedWithClearMessages) {
    if (!zmq_has("curve")) {
        GTEST_SKIP() << "this libzmq has no CURVE";
    }
    KeyFiles files;
    KeyPair server;
    std::string error;
    const std::string good =
        files.write("server.key", std::string("# the router\n") + server.sec.data() + "\n");
    auto g = KvReadyGuard::load({.curve_secret_key_file = good}, error);
    ASSERT_TRUE(g) << error;
    EXPECT_TRUE(g->curve());
    EXPECT_EQ(g->public_key_z85(), server.pub.data());
    struct Case {
        KvReadyGuardOptions o;
        std::string says;
    };
    const std::vector<Case> cases{
        {{.curve_secret_key_file = (files.dir / "absent").string()}, "cannot read the CURVE"},
        {{.curve_secret_key_file = files.write("short", "abc\n")}, "line 1: expected a Z85 key"},
        {{.curve_secret_key_file = files.write("empty", "# nothing\n\n")}, "holds no key"},
        {{.curve_secret_key_file =
              files.write("two", std::string(server.sec.data()) + "\n" + server.sec.data() + "\n")},
         "holds 2 keys; give one"},
        {{.curve_secret_key_file = good,
          .curve_clients_file = files.write("bad-clients", "# ok\n" + std::string(40, '"'))},
         "clients file"},
        {{.curve_secret_key_file = files.write("huge", std::string((4u << 20) + 1, 'x'))},
         "is over 4 MiB"},
    };
    for (const Case& c : cases) {
        std::string why;
        EXPECT_FALSE(KvReadyGuard::load(c.o, why)) << c.says;
        EXPECT_NE(why.find(c.says), std::string::npos) << c.says << ": " << why;
    }
}

TEST_F(KvReadyListenerTest, AnAddressNotAllowedIsRefusedAtTheHandshakeAndCounted) {
    opts.guard.allow = {"10.0.0.0/8"};
    auto& refusing = start();
    auto outsider = pusher();
    send(outsider, notification("from-outside"));
    ASSERT_TRUE(until([&] { return refused("address") >= 1; }));
    settle();
    EXPECT_FALSE(refusing.table().state("from-outside").has_value());
    EXPECT_EQ(notifications("unknown"), 0);
    EXPECT_EQ(refused("key"), 0);

    // The same sender, allowed: its notifications arrive.
    refusing.stop();
    opts.guard.allow = {"10.0.0.0/8", "127.0.0.0/8"};
    auto& l = start();
    auto insider = pusher();
    send(insider, notification("from-inside"));
    ASSERT_TRUE(until([&] { return notifications("unknown") == 1; }));
    EXPECT_TRUE(l.table().state("from-inside").has_value());
}

TEST_F(KvReadyListenerTest, UnderCurveOnlyListedKeysAreHeard) {
    if (!zmq_has("curve")) {
        GTEST_SKIP() << "this libzmq has no CURVE";
    }
    KeyFiles files;
    KeyPair server, listed, stranger;
    opts.guard.curve_secret_key_file = files.write("server.key", server.sec.data());
    opts.guard.curve_clients_file =
        files.write("clients", std::string("# prefill-0\n") + listed.pub.data() + "\n");
    auto& l = start();
    ASSERT_TRUE(l.guard() && l.guard()->curve());
    EXPECT_EQ(l.guard()->public_key_z85(), server.pub.data());
    auto curve_pusher = [&](const KeyPair& me) {
        zmq::socket_t s(zctx, zmq::socket_type::push);
        s.set(zmq::sockopt::linger, 0);
        s.set(zmq::sockopt::curve_serverkey, std::string(server.pub.data()));
        s.set(zmq::sockopt::curve_publickey, std::string(me.pub.data()));
        s.set(zmq::sockopt::curve_secretkey, std::string(me.sec.data()));
        s.connect(l.endpoint());
        return s;
    };
    auto bad = curve_pusher(stranger);
    send(bad, notification("from-stranger"));
    ASSERT_TRUE(until([&] { return refused("key") >= 1; }));
    auto good = curve_pusher(listed);
    send(good, notification("from-listed"));
    ASSERT_TRUE(until([&] { return l.table().state("from-listed").has_value(); }));
    settle();
    EXPECT_FALSE(l.table().state("from-stranger").has_value());
    EXPECT_EQ(notifications("unknown"), 1);
    EXPECT_EQ(refused("address"), 0);
}

TEST_F(KvReadyListenerTest, StopWakesEveryWaiter) {
    auto& l = start();
    auto& a = hold(l.expect("req-s1", 1));
    auto& b = hold(l.expect("req-s2", 2));
    auto wa = spawn_wait(a, ms{30'000});
    auto wb = spawn_wait(b, ms{30'000});
    ASSERT_TRUE(until([&] { return l.table().wakers().size() == 2; }));
    const auto t0 = Clock::now();
    l.stop();
    ASSERT_TRUE(until([&] { return wa->end && wb->end; }, ms{1000}));
    EXPECT_EQ(*wa->end, WaitEnd::Stopped);
    EXPECT_EQ(*wb->end, WaitEnd::Stopped);
    EXPECT_LT(Clock::now() - t0, ms{1000});
    auto late = l.expect("req-s3", 1);
    EXPECT_FALSE(late.ok());
    EXPECT_EQ(late.error(), "kv-ready listener stopped");
    auto w = spawn_wait(a, ms{30'000});
    settle();
    ASSERT_TRUE(w->end);
    EXPECT_EQ(*w->end, WaitEnd::Stopped);
}

TEST(KvReadyOwner, TheReplicaIdEndsTheReqId) {
    const std::string one = kv_req_id("");  // one replica: the random part alone
    EXPECT_EQ(one.size(), kKvReqIdRandomChars);
    EXPECT_EQ(one.find_first_not_of("0123456789abcdef"), std::string::npos) << one;
    EXPECT_EQ(owner_of(one), "");
    const std::string two = kv_req_id("10.0.0.2");
    EXPECT_EQ(two.size(), kKvReqIdRandomChars + 1 + 8);
    EXPECT_EQ(owner_of(two), "10.0.0.2");
    EXPECT_EQ(owner_of("req-1@10.0.0.2"), "10.0.0.2");
    EXPECT_EQ(owner_of("a@b@fd00::1"), "fd00::1");  // the last '@' counts
    EXPECT_EQ(owner_of("req-1"), "");
}

// The req_id is the only thing a forged notification has to name, so it must not be guessable:
// fresh random bytes each time, nothing shared between ids.
TEST(KvReadyOwner, ReqIdsAreFreshRandomEachTime) {
    std::set<std::string> ids;
    std::array<int, 16> digit_counts{};
    constexpr int kIds = 4096;
    for (int i = 0; i < kIds; ++i) {
        const std::string id = kv_req_id("");
        ids.insert(id);
        for (char c : id) {
            ++digit_counts[c <= '9' ? c - '0' : c - 'a' + 10];
        }
    }
    EXPECT_EQ(ids.size(), static_cast<std::size_t>(kIds));
    // Every hex digit turns up about as often as the others (expected 8192 each; a counter or a
    // constant part would skew this far past the bound).
    for (int d = 0; d < 16; ++d) {
        EXPECT_GT(digit_counts[d], 7400) << d;
        EXPECT_LT(digit_counts[d], 9000) << d;
    }
}

// Two listeners as two replicas: A ("a") forwards what is B's (replica 127.0.0.1, the host of
// its PULL socket) and counts what has no known owner; B takes what A forwarded and drops a
// forwarded frame that is not its own, never forwarding it again.
TEST_F(KvReadyListenerTest, AnotherReplicasNotificationIsForwardedToIt) {
    metrics::Registry b_reg;
    metrics::RouterMetrics b_rm{b_reg};
    KvReadyOptions b_opts = opts;
    b_opts.replica_id = "127.0.0.1";
    KvReadyListener b(ioc.get_executor(), b_opts, b_rm);
    std::string error;
    ASSERT_TRUE(b.start(error)) << error;
    const std::string b_port = b.endpoint().substr(b.endpoint().rfind(':') + 1);

    KvReadyForwarder fwd("a", 1000, rm);
    opts.replica_id = "a";
    opts.forwarder = &fwd;
    start();
    fwd.set_static(
        {config::InstanceAddress{"127.0.0.1", static_cast<unsigned short>(std::stoi(b_port))}});
    EXPECT_EQ(fwd.peers(), 1u);
    EXPECT_EQ(series_value(mreg, "pdrouter_kv_ready_peers").value_or(-1), 1);

    auto& mine = hold(listener->expect("r-1@a", 1));
    // Ends before `b` does (no wait is spawned on it).
    KvReadyListener::Registration theirs = b.expect("r-2@127.0.0.1", 1);
    ASSERT_TRUE(mine.ok() && theirs.ok());
    zmq::socket_t to_a = pusher();
    send(to_a, notification("r-1@a"));
    send(to_a, notification("r-2@127.0.0.1"));
    send(to_a, notification("r-3@10.9.9.9"));
    auto forwarded = [](metrics::Registry& r, const char* result) {
        return series_value(r, "pdrouter_kv_ready_forwarded_total", {{"result", result}})
            .value_or(-1);
    };
    EXPECT_TRUE(until(
        [&] { return mine.ready() && theirs.ready() && forwarded(mreg, "unknown_owner") == 1; }));
    EXPECT_EQ(forwarded(mreg, "sent"), 1);
    EXPECT_EQ(forwarded(b_reg, "received"), 1);
    // Only r-1 went into A's table (before any wait began: early); r-2 into B's.
    EXPECT_EQ(notifications("early"), 1);
    EXPECT_EQ(series_value(b_reg, "pdrouter_kv_ready_notifications_total", {{"outcome", "early"}})
                  .value_or(-1),
              1);

    // A frame forwarded to B that is not B's: dropped and counted, not sent on.
    zmq::socket_t to_b(zctx, zmq::socket_type::push);
    to_b.set(zmq::sockopt::linger, 0);
    to_b.connect(b.endpoint());
    to_b.send(zmq::buffer(kForwardedMark.data(), kForwardedMark.size()), zmq::send_flags::sndmore);
    send(to_b, notification("r-4@a"));
    EXPECT_TRUE(until([&] { return forwarded(b_reg, "not_owner") == 1; }));
    EXPECT_EQ(series_value(b_reg, "pdrouter_kv_ready_malformed_total", {{"reason", "multipart"}})
                  .value_or(-1),
              0);
    listener->stop();  // before `fwd` goes
    b.stop();
}

// A peer that does not take its notifications fills its queue; sends then fail at once.
TEST_F(KvReadyListenerTest, AFullPeerQueueDropsAndCountsWithoutBlocking) {
    KvReadyForwarder fwd("a", 2, rm);
    fwd.set_static({config::InstanceAddress{"127.0.0.1", 9}});  // discard port: nobody listens
    int full = 0;
    const Clock::time_point t0 = Clock::now();
    for (int i = 0; i < 50; ++i) {
        full += fwd.forward("127.0.0.1", notification("x")) == KvReadyForwarder::Result::QueueFull;
    }
    EXPECT_LT(Clock::now() - t0, ms{1000});
    EXPECT_GE(full, 40);
    EXPECT_EQ(fwd.forward("10.1.1.1", "x"), KvReadyForwarder::Result::UnknownOwner);
    fwd.set_static({});
    EXPECT_EQ(fwd.peers(), 0u);
}

}  // namespace
}  // namespace pdr::kv
