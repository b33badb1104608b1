// LeaseKeeper against two scripted prefill servers: batching per P, timing of the first
// refresh, stop after first byte / destruction, slow P isolation, forward() grouping.
#include <gtest/gtest.h>

#include <memory>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "config/config.hpp"
#include "net/upstream/client.hpp"
#include "router/kv/lease_keeper.hpp"
#include "router/metrics/router_metrics.hpp"
#include "tests/mocks/fake_http_server.hpp"
#include "tests/mocks/run_until.hpp"
#include "tests/unit/router/metrics/series_value.hpp"

namespace pdr::kv {
namespace {

using test::FakeHttpServer;
using test::FakeReply;
using IdSet = std::multiset<std::string>;

constexpr std::string_view kRoute = "/internal/nixl/lease_refresh";

FakeReply ok_reply(const FakeHttpServer::Request&) {
    return FakeReply{200, "{}"};
}

IdSet ids_of(const test::RecordedRequest& r) {
    IdSet out;
    auto j = nlohmann::json::parse(r.body, nullptr, false);
    if (!j.is_object() || !j.contains("request_ids")) {
        return {"<bad body: " + r.body + ">"};
    }
    for (const auto& id : j["request_ids"]) {
        out.insert(id.get<std::string>());
    }
    return out;
}

IdSet make_ids(const std::string& prefix, int n) {
    IdSet out;
    for (int i = 0; i < n; ++i) {
        out.insert(prefix + std::to_string(i));
    }
    return out;
}

class LeaseKeeperTest : public ::testing::Test {
protected:
    LeaseKeeperTest() {
        cfg.kv_lease_timeout = Duration{300};  // period 100 ms
        cfg.connect_timeout = Duration{500};
    }
    ~LeaseKeeperTest() override {
        if (keeper) {
            keeper->stop();
        }
        test::run_for(ioc, Duration{20});
    }
    LeaseKeeper& lk() {
        if (!keeper) {
            keeper = std::make_unique<LeaseKeeper>(ioc.get_executor(), client, rm, cfg);
        }
        return *keeper;
    }
    upstream::Endpoint endpoint_of(const FakeHttpServer& s) {
        return upstream::Endpoint{"127.0.0.1", s.port()};
    }

    net::io_context ioc;
    metrics::Registry mreg;
    metrics::RouterMetrics rm{mreg};
    config::Config cfg;
    upstream::Client client{ioc.get_executor()};
    FakeHttpServer p1{ioc.get_executor(), ok_reply};
    FakeHttpServer p2{ioc.get_executor(), ok_reply};
    std::unique_ptr<LeaseKeeper> keeper;
};

TEST_F(LeaseKeeperTest, OneBatchedPostPerPrefillPerPeriod) {
    p1.start();
    p2.start();
    EXPECT_EQ(lk().period(), Duration{100});
    std::vector<LeaseKeeper::Hold> holds;
    const IdSet ids1 = make_ids("a-", 5), ids2 = make_ids("b-", 3);
    const auto t0 = Clock::now();
    for (const auto& id : ids1) {
        holds.push_back(lk().hold(id, endpoint_of(p1)));
    }
    for (const auto& id : ids2) {
        holds.push_back(lk().hold(id, endpoint_of(p2)));
    }
    EXPECT_EQ(lk().held(), 8u);
    EXPECT_EQ(rm.kv_handles_held.Value(), 8);
    lk().start();

    ASSERT_TRUE(test::run_until(
        ioc, [&] { return p1.requests().size() >= 3 && p2.requests().size() >= 3; },
        Duration{3000}));
    // The first refresh is due one period after the hold, not at once.
    EXPECT_GE(p1.requests()[0].at - t0, Duration{95});
    EXPECT_GE(p2.requests()[0].at - t0, Duration{95});
    for (const auto& r : p1.requests()) {
        EXPECT_EQ(r.target, kRoute);
        EXPECT_EQ(r.method, http::verb::post);
        EXPECT_EQ(ids_of(r), ids1);  // one POST carries every id of this P
    }
    for (const auto& r : p2.requests()) {
        EXPECT_EQ(ids_of(r), ids2);
    }
    // About one POST per period: consecutive refreshes at least ~a period apart.
    for (std::size_t i = 1; i < p1.requests().size(); ++i) {
        EXPECT_GE(p1.requests()[i].at - p1.requests()[i - 1].at, Duration{80});
    }
    const auto posts = p1.requests().size() + p2.requests().size();
    double sent = 0;
    for (const auto& r : p1.requests()) {
        sent += static_cast<double>(ids_of(r).size());
    }
    for (const auto& r : p2.requests()) {
        sent += static_cast<double>(ids_of(r).size());
    }
    // Every POST the servers saw has been counted once its answer came back (allow the last
    // answers to be in flight).
    ASSERT_TRUE(test::run_until(
        ioc, [&] { return rm.lease_refresh_sent.Value() >= sent; }, Duration{1000}));
    EXPECT_GE(posts, 6u);
}

TEST_F(LeaseKeeperTest, StopsAfterFirstByteAndForgetsOnDestruction) {
    p1.start();
    auto x = lk().hold("x", endpoint_of(p1));
    auto y = std::make_unique<LeaseKeeper::Hold>(lk().hold("y", endpoint_of(p1)));
    lk().start();
    ASSERT_TRUE(test::run_until(
        ioc, [&] { return p1.requests().size() >= 1; }, Duration{2000}));
    EXPECT_EQ(ids_of(p1.requests()[0]), (IdSet{"x", "y"}));

    x.first_byte();
    x.first_byte();  // idempotent
    EXPECT_EQ(lk().held(), 1u);
    EXPECT_EQ(lk().known(), 2u);
    EXPECT_EQ(rm.kv_handles_held.Value(), 1);
    const auto before = p1.requests().size();
    ASSERT_TRUE(test::run_until(
        ioc, [&] { return p1.requests().size() >= before + 2; }, Duration{2000}));
    EXPECT_EQ(ids_of(p1.requests().back()), (IdSet{"y"}));

    y.reset();
    EXPECT_EQ(lk().held(), 0u);
    EXPECT_EQ(lk().known(), 1u);
    test::run_for(ioc, Duration{50});  // let a refresh already on the wire land
    const auto after = p1.requests().size();
    test::run_for(ioc, Duration{400});  // four periods
    EXPECT_EQ(p1.requests().size(), after);

    {
        LeaseKeeper::Hold moved = std::move(x);
        EXPECT_FALSE(x.active());  // NOLINT(bugprone-use-after-move)
        EXPECT_TRUE(moved.active());
    }
    EXPECT_EQ(lk().known(), 0u);
    EXPECT_EQ(rm.kv_handles_held.Value(), 0);
}

TEST_F(LeaseKeeperTest, SameIdHeldTwiceIsRefreshedUntilBothEnd) {
    p1.start();
    auto a = lk().hold("dup", endpoint_of(p1));
    auto b = lk().hold("dup", endpoint_of(p1));
    EXPECT_EQ(lk().held(), 2u);
    a.reset();
    EXPECT_EQ(lk().held(), 1u);
    lk().start();
    ASSERT_TRUE(test::run_until(
        ioc, [&] { return p1.requests().size() >= 1; }, Duration{2000}));
    EXPECT_EQ(ids_of(p1.requests()[0]), (IdSet{"dup"}));
    auto fwd = test::run_task(ioc, lk().forward({"dup"}), Duration{2000});
    ASSERT_TRUE(fwd.has_value());
    EXPECT_EQ(fwd->forwarded, 1u);
    b.reset();
    fwd = test::run_task(ioc, lk().forward({"dup"}), Duration{2000});
    ASSERT_TRUE(fwd.has_value());
    EXPECT_EQ(fwd->unknown, 1u);
}

TEST_F(LeaseKeeperTest, LargeSetsAreSplitIntoBoundedBatches) {
    p1.start();
    std::vector<LeaseKeeper::Hold> holds;
    const IdSet all = make_ids("r", 2500);
    for (const auto& id : all) {
        holds.push_back(lk().hold(id, endpoint_of(p1)));
    }
    lk().start();
    ASSERT_TRUE(test::run_until(
        ioc, [&] { return p1.requests().size() >= 3; }, Duration{3000}));
    IdSet seen;
    std::vector<std::size_t> sizes;
    for (std::size_t i = 0; i < 3; ++i) {
        auto ids = ids_of(p1.requests()[i]);
        sizes.push_back(ids.size());
        seen.insert(ids.begin(), ids.end());
    }
    EXPECT_EQ(sizes, (std::vector<std::size_t>{1000, 1000, 500}));
    EXPECT_EQ(seen, all);
}

TEST_F(LeaseKeeperTest, SlowPrefillDoesNotDelayOthers) {
    p1.set_handler([](const FakeHttpServer::Request&) {
        return FakeReply{200, "{}", Duration{2000}};
    });
    p1.start();
    p2.start();
    auto s = lk().hold("slow", endpoint_of(p1));
    auto f = lk().hold("fast", endpoint_of(p2));
    lk().start();
    ASSERT_TRUE(test::run_until(
        ioc, [&] { return p2.requests().size() >= 4; }, Duration{3000}));
    EXPECT_EQ(p1.requests().size(), 1u);  // still answering the first; not piled up
}

TEST_F(LeaseKeeperTest, FailedRefreshesAreCountedAndRetriedNextPeriod) {
    p1.set_handler([](const FakeHttpServer::Request&) { return FakeReply{500, "no"}; });
    p1.start();
    auto h = lk().hold("z", endpoint_of(p1));
    lk().start();
    ASSERT_TRUE(test::run_until(
        ioc, [&] { return p1.requests().size() >= 2; }, Duration{2000}));
    ASSERT_TRUE(test::run_until(
        ioc,
        [&] {
            return metrics::series_value(mreg, "pdrouter_lease_refresh_requests_total",
                                         {{"result", "error"}})
                       .value_or(0) >= 2;
        },
        Duration{1000}));
}

double refresh_results(metrics::Registry& reg, const std::string& result) {
    return metrics::series_value(reg, "pdrouter_lease_refresh_requests_total", {{"result", result}})
        .value_or(-1);
}

// Merged vLLM has no lease route (its D renews P's leases itself, vllm#41383): one 404 and the
// keeper stops posting to that P, while it goes on refreshing a P that has the route, and it
// never takes the unanswered leases as renewed.
TEST_F(LeaseKeeperTest, APrefillWithoutTheRouteIsAskedOnceThenLeftAlone) {
    p1.set_handler([](const FakeHttpServer::Request&) { return FakeReply{404, "{}"}; });
    p1.start();
    p2.start();
    auto a = lk().hold("a", endpoint_of(p1));
    auto b = lk().hold("b", endpoint_of(p2));
    const auto a_until = a.lease_until();
    const auto b_until = b.lease_until();
    const std::string p1_key = endpoint_of(p1).authority();
    const std::string p2_key = endpoint_of(p2).authority();
    EXPECT_EQ(lk().route(p1_key), LeaseKeeper::Route::Unknown);
    lk().start();
    // Six periods of p2's refreshes: p1 would have had as many without the learning.
    ASSERT_TRUE(test::run_until(
        ioc, [&] { return p2.requests().size() >= 6; }, Duration{3000}));
    EXPECT_EQ(p1.requests().size(), 1u);
    EXPECT_EQ(lk().route(p1_key), LeaseKeeper::Route::Absent);
    EXPECT_EQ(lk().route(p2_key), LeaseKeeper::Route::Http);
    EXPECT_EQ(refresh_results(mreg, "no_route"), 1);
    EXPECT_EQ(refresh_results(mreg, "error"), 0);
    EXPECT_EQ(rm.lease_route_absent.Value(), 1);
    EXPECT_EQ(a.lease_until(), a_until) << "a refresh that was not made was taken as made";
    EXPECT_GT(b.lease_until(), b_until);
    // An inbound refresh for p1's id is not posted either.
    auto r = test::run_task(ioc, lk().forward({"a"}), Duration{1000});
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ(r->no_route, 1u);
    EXPECT_EQ(r->forwarded, 0u);
    EXPECT_EQ(p1.requests().size(), 1u);

    // The instance came back from down (another engine build may serve the route): asked again.
    p1.set_handler(ok_reply);
    lk().recheck_route(p1_key);
    EXPECT_EQ(rm.lease_route_absent.Value(), 0);
    ASSERT_TRUE(test::run_until(
        ioc, [&] { return lk().route(p1_key) == LeaseKeeper::Route::Http; }, Duration{2000}));
    ASSERT_TRUE(test::run_until(
        ioc, [&] { return a.lease_until() > a_until; }, Duration{2000}));
}

TEST_F(LeaseKeeperTest, ARouteAnsweredMethodNotAllowedIsAskedAgainAfterTheRecheckTime) {
    cfg.lease_route_recheck = Duration{400};  // four periods
    p1.set_handler([](const FakeHttpServer::Request&) { return FakeReply{405, "{}"}; });
    p1.start();
    p2.start();
    auto a = lk().hold("a", endpoint_of(p1));
    auto b = lk().hold("b", endpoint_of(p2));
    lk().start();
    ASSERT_TRUE(test::run_until(
        ioc, [&] { return p1.requests().size() >= 2; }, Duration{3000}));
    // The second ask came one recheck time after the first, not one period.
    EXPECT_GE(p1.requests()[1].at - p1.requests()[0].at, Duration{380});
    EXPECT_GE(p2.requests().size(), 3u);
    EXPECT_EQ(refresh_results(mreg, "no_route"), 2);
    EXPECT_EQ(lk().route(endpoint_of(p1).authority()), LeaseKeeper::Route::Absent);
    EXPECT_EQ(rm.lease_route_absent.Value(), 1);  // the same instance, counted once
}

TEST_F(LeaseKeeperTest, ForwardGroupsByPrefillAndCountsUnknown) {
    p1.start();
    p2.start();
    auto a = lk().hold("a", endpoint_of(p1));
    auto b = lk().hold("b", endpoint_of(p1));
    auto c = lk().hold("c", endpoint_of(p2));
    auto d = lk().hold("d", endpoint_of(p1));
    d.first_byte();  // still known for forwarding
    // Refresh loop not started: only forward() talks to the servers.
    auto r =
        test::run_task(ioc, lk().forward({"a", "c", "d", "nope", "b", "gone"}), Duration{3000});
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ(r->forwarded, 4u);
    EXPECT_EQ(r->unknown, 2u);
    ASSERT_EQ(p1.requests().size(), 1u);
    ASSERT_EQ(p2.requests().size(), 1u);
    EXPECT_EQ(ids_of(p1.requests()[0]), (IdSet{"a", "b", "d"}));
    EXPECT_EQ(ids_of(p2.requests()[0]), (IdSet{"c"}));
    EXPECT_EQ(rm.lease_refresh_forwarded.Value(), 4);
    EXPECT_EQ(rm.lease_refresh_unknown.Value(), 2);
    EXPECT_EQ(rm.lease_refresh_sent.Value(), 0);  // forwards are not our own refreshes

    r = test::run_task(ioc, lk().forward({"x"}), Duration{1000});
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ(r->forwarded, 0u);
    EXPECT_EQ(r->unknown, 1u);
    EXPECT_EQ(p1.requests().size() + p2.requests().size(), 2u);
}

TEST_F(LeaseKeeperTest, ForwardCountsAndSendsARepeatedIdOnce) {
    p1.start();
    auto a = lk().hold("a", endpoint_of(p1));
    auto r = test::run_task(ioc, lk().forward({"a", "nope", "a", "nope", "a"}), Duration{3000});
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ(r->forwarded, 1u);
    EXPECT_EQ(r->unknown, 1u);
    ASSERT_EQ(p1.requests().size(), 1u);
    EXPECT_EQ(ids_of(p1.requests()[0]), (IdSet{"a"}));
    EXPECT_EQ(rm.lease_refresh_forwarded.Value(), 1);
    EXPECT_EQ(rm.lease_refresh_unknown.Value(), 1);
}

TEST_F(LeaseKeeperTest, ApiKeyIsSentToPrefill) {
    cfg.upstream_api_key = "sekret";
    p1.start();
    auto a = lk().hold("a", endpoint_of(p1));
    lk().start();
    ASSERT_TRUE(test::run_until(
        ioc, [&] { return p1.requests().size() >= 1; }, Duration{2000}));
    EXPECT_EQ(p1.requests()[0].authorization, "Bearer sekret");
}

// A prefill outside --instance-allow (Instance::upstream_key false) never sees the key: neither in
// the periodic refreshes nor in forwarded ones.
TEST_F(LeaseKeeperTest, ApiKeyOnlyToPrefillsThatMayHaveIt) {
    cfg.upstream_api_key = "sekret";
    p1.start();
    p2.start();
    auto a = lk().hold("a", endpoint_of(p1));
    auto b = lk().hold("b", endpoint_of(p2), false);
    auto fr = test::run_task(ioc, lk().forward({"a", "b"}), Duration{3000});
    ASSERT_TRUE(fr.has_value());
    ASSERT_EQ(p1.requests().size(), 1u);
    ASSERT_EQ(p2.requests().size(), 1u);
    EXPECT_EQ(p1.requests()[0].authorization, "Bearer sekret");
    EXPECT_EQ(p2.requests()[0].authorization, "");
    lk().start();
    ASSERT_TRUE(test::run_until(
        ioc, [&] { return p1.requests().size() >= 2 && p2.requests().size() >= 2; },
        Duration{2000}));
    EXPECT_EQ(p1.requests()[1].authorization, "Bearer sekret");
    EXPECT_EQ(p2.requests()[1].authorization, "");
}

TEST_F(LeaseKeeperTest, DisabledKeeperHoldsNothing) {
    cfg.lease_refresh = false;
    p1.start();
    auto h = lk().hold("a", endpoint_of(p1));
    EXPECT_FALSE(h.active());
    EXPECT_EQ(lk().held(), 0u);
    lk().start();
    test::run_for(ioc, Duration{300});
    EXPECT_TRUE(p1.requests().empty());
    h.first_byte();  // no-op
}

TEST_F(LeaseKeeperTest, StopLetsTheIoContextFinish) {
    p1.set_handler([](const FakeHttpServer::Request&) {
        return FakeReply{200, "{}", Duration{5000}};
    });
    p1.start();
    auto h = lk().hold("a", endpoint_of(p1));
    lk().start();
    ASSERT_TRUE(test::run_until(
        ioc, [&] { return p1.requests().size() >= 1; }, Duration{2000}));
    lk().stop();  // cancels the loop and the POST waiting on the slow P
    p1.stop();
    p2.stop();
    client.close_idle();
    const auto t0 = Clock::now();
    ioc.restart();
    ioc.run_for(Duration{4000});
    EXPECT_TRUE(ioc.stopped());
    EXPECT_LT(Clock::now() - t0, Duration{2000});
}

}  // namespace
}  // namespace pdr::kv
