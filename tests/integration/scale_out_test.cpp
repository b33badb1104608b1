// Scale-out with real processes: a load-aware decode policy steering around a slow decode
// (whose streams count as in flight until they end), selective disaggregation of short prompts,
// the opt-in direct fallback when no prefill is up, and DNS discovery through the hosts-file
// resolver (decodes on 127.0.0.1 and 127.0.0.2, one port, as a headless Service gives them).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tests/support/checks.hpp"
#include "tests/support/fixture.hpp"

namespace pdr::test {
namespace {

using nlohmann::json;

class ScaleOutTest : public ClusterTest {};

double instance_in_flight(const Server& router, const std::string& role, const Server& inst) {
    return metric(metrics_text(router), "pdrouter_instance_in_flight",
                  {{"role", role}, {"instance", inst.address()}})
        .value_or(-1);
}

// Sends a streaming completion on its own connection and returns once its first SSE event
// arrived (the decode's headers are long past); the stream goes on, unread, on `c`.
::testing::AssertionResult open_stream(const Server& router, Connection& c, int i) {
    std::string error;
    if (!c.connect(router.port, error)) {
        return ::testing::AssertionFailure() << "connect: " << error;
    }
    HttpRequest req;
    req.method = "POST";
    req.target = "/v1/completions";
    req.headers = {{"Content-Type", "application/json"}};
    req.body = completion_body("stream " + std::to_string(i), 20, true).dump();
    if (!c.write_all(serialize(req), error)) {
        return ::testing::AssertionFailure() << "write: " << error;
    }
    std::string got;
    const auto deadline = Clock::now() + Ms{5000};
    while (got.find("data: ") == std::string::npos) {
        bool eof = false, timed_out = false;
        got += c.read_some(deadline, eof, timed_out, error);
        if (eof || timed_out || !error.empty()) {
            return ::testing::AssertionFailure() << "no SSE event (eof " << eof << ", timed out "
                                                 << timed_out << ", " << error << "): " << got;
        }
    }
    if (got.rfind("HTTP/1.1 200", 0) != 0) {
        return ::testing::AssertionFailure() << got;
    }
    return ::testing::AssertionSuccess();
}

TEST_F(ScaleOutTest, LeastOutstandingAvoidsASlowDecode) {
    auto& pd = start(PdOptions{}.d(2).router({"--decode-policy", "least_outstanding"}));
    Server& slow = *pd.decode[0];
    Server& fast = *pd.decode[1];
    // 20 tokens at 400 ms: a stream on the slow decode lasts 8 s, past this test's requests.
    sim_fault(slow, {{"token_delay_ms", 400}, {"count", -1}});
    constexpr int kRequests = 8;
    std::vector<Connection> streams(kRequests);
    for (int i = 0; i < kRequests; ++i) {
        // The fast decode's earlier streams have ended: it has nothing in flight.
        ASSERT_TRUE(wait_until([&] { return instance_in_flight(*pd.router, "decode", fast) == 0; },
                               Ms{5000}));
        ASSERT_TRUE(open_stream(*pd.router, streams[i], i)) << i;
    }
    // The slow decode took the first request (both idle: list order) and no other: its stream
    // counted as in flight after its headers arrived, until now.
    EXPECT_EQ(counter(sim_state(slow), "requests"), 1);
    EXPECT_EQ(counter(sim_state(fast), "requests"), kRequests - 1);
    EXPECT_EQ(instance_in_flight(*pd.router, "decode", slow), 1);
    const auto m = metrics_text(*pd.router);
    EXPECT_EQ(metric(m, "pdrouter_policy_picks_total",
                     {{"role", "decode"}, {"policy", "least_outstanding"}})
                  .value_or(0),
              kRequests)
        << m;
    EXPECT_EQ(
        metric(m, "pdrouter_policy_picks_total", {{"role", "prefill"}, {"policy", "round_robin"}})
            .value_or(0),
        kRequests)
        << m;
    for (auto& c : streams) {
        c.close(true);
    }
    EXPECT_TRUE(
        wait_until([&] { return instance_in_flight(*pd.router, "decode", slow) == 0; }, Ms{5000}));
}

TEST_F(ScaleOutTest, ShortPromptsSkipThePrefill) {
    auto& pd = start(
        PdOptions{}.router({"--disagg-min-prompt-chars", "40", "--disagg-min-prompt-tokens", "8"}));
    json short_text = completion_body("short prompt", 4, false);
    json short_chat = chat_body("hi", 4, true);
    json long_text =
        completion_body("a prompt long enough to be worth a prefill instance's work", 4, true);
    json short_ids = completion_body("", 4, false);
    short_ids["prompt"] = json::array({1, 2, 3});
    json long_ids = completion_body("", 4, false);
    long_ids["prompt"] = json::array({1, 2, 3, 4, 5, 6, 7, 8, 9, 10});

    for (const json* body : {&short_text, &short_chat, &short_ids}) {
        EXPECT_TRUE(answer_ok(send_generation(*pd.router, *body), *body)) << body->dump();
    }
    EXPECT_EQ(counter(sim_state(*pd.prefill[0]), "requests"), 0);
    EXPECT_EQ(counter(sim_state(*pd.decode[0]), "requests"), 3);
    for (const json* body : {&long_text, &long_ids}) {
        EXPECT_TRUE(answer_ok(send_generation(*pd.router, *body), *body)) << body->dump();
    }
    EXPECT_EQ(counter(sim_state(*pd.prefill[0]), "requests"), 2);
    const auto m = metrics_text(*pd.router);
    EXPECT_EQ(metric(m, "pdrouter_direct_requests_total", {{"reason", "short_prompt"}}).value_or(0),
              3)
        << m;
    EXPECT_EQ(metric(m, "pdrouter_flow_requests_total", {{"mode", "direct"}}).value_or(0), 3) << m;
    EXPECT_EQ(metric(m, "pdrouter_flow_requests_total", {{"mode", "pull"}}).value_or(0), 2) << m;
    EXPECT_TRUE(kv_freed(pd, Ms{3000}));
    EXPECT_TRUE(no_violations(pd));
}

TEST_F(ScaleOutTest, FallbackDirectServesOnDecodeWhenNoPrefillIsUp) {
    Cluster& c = new_cluster();
    DeadPort dead_prefill;
    Server& d = c.start_pdsim("decode");
    const std::vector<std::string> fast_health{"--health-interval-ms",    "100",
                                               "--health-backoff-max-ms", "200",
                                               "--connect-timeout-ms",    "300"};
    std::vector<std::string> with_fallback = fast_health;
    with_fallback.push_back("--fallback-direct");
    Server& on = c.start_router({dead_prefill.address()}, {d.address()}, with_fallback);
    Server& off = c.start_router({dead_prefill.address()}, {d.address()}, fast_health);
    auto prefill_down = [](const Server& r) {
        return [&r] {
            return metric(metrics_text(r), "pdrouter_instances",
                          {{"role", "prefill"}, {"health", "up"}})
                       .value_or(-1) == 0;
        };
    };
    ASSERT_TRUE(wait_until(prefill_down(on), Ms{5000}));
    ASSERT_TRUE(wait_until(prefill_down(off), Ms{5000}));

    const json body = chat_body("no prefill today", 5, true);
    EXPECT_TRUE(answer_ok(send_generation(on, body), body));
    const auto m = metrics_text(on);
    EXPECT_EQ(metric(m, "pdrouter_direct_requests_total", {{"reason", "no_prefill"}}).value_or(0),
              1)
        << m;
    // Not opted in: 503, as before.
    const auto r = send_generation(off, body);
    EXPECT_EQ(r.status, 503) << r.describe();
    EXPECT_EQ(counter(sim_state(d), "requests"), 1);
}

// GET /instances: "role name source removed" per instance.
std::vector<std::string> listed(const Server& router) {
    const auto r = http_get(router.port, "/instances", {{"Authorization", "Bearer admin-key"}});
    std::vector<std::string> out;
    const auto j = json::parse(r.body, nullptr, false);
    if (r.status != 200 || !j.is_array()) {
        return {"<GET /instances: " + std::to_string(r.status) + " " + r.body + ">"};
    }
    for (const auto& i : j) {
        out.push_back(i.value("role", "") + " " + i.value("name", "") + " " +
                      i.value("source", "") + (i.value("removed", false) ? " removed" : ""));
    }
    std::sort(out.begin(), out.end());
    return out;
}

TEST_F(ScaleOutTest, DnsDiscoveryAddsAndDrainsDecodes) {
    Cluster& c = new_cluster();
    Server& p = c.start_pdsim("prefill");
    Server& d1 = c.start_pdsim("decode");
    const std::string port = std::to_string(d1.port);
    Server& d2 = c.start_pdsim("decode", {"--host", "127.0.0.2", "--port", port});
    const std::string hosts = c.dir().file("hosts");
    auto publish = [&](const std::string& addresses) {
        std::ofstream(hosts + ".new")
            << "# the headless Service\ndecode.pd.test " << addresses << "\n";
        std::rename((hosts + ".new").c_str(), hosts.c_str());  // the router never reads half
    };
    publish("127.0.0.1");
    Server& router =
        c.start_router({p.address()}, {},
                       {"--decode-dns", "decode.pd.test:" + port, "--dns-hosts-file", hosts,
                        "--dns-refresh-ms", "100", "--admin-api-key", "admin-key"});
    const std::string src = " dns:decode.pd.test:" + port;
    const std::string a1 = "decode 127.0.0.1:" + port + src;
    const std::string a2 = "decode 127.0.0.2:" + port + src;
    const std::string p1 = "prefill " + p.address() + " static";
    ASSERT_TRUE(wait_until(
        [&] {
            return listed(router) == std::vector<std::string>{a1, p1};
        },
        Ms{5000}))
        << testing::PrintToString(listed(router));
    json body = completion_body("found by name", 4, false);
    EXPECT_TRUE(answer_ok(send_generation(router, body), body));
    // Discovery's metrics: every role's series from the start, the decode name's lookups counted.
    auto disc = [&](const std::string& name, const std::map<std::string, std::string>& labels) {
        return metric(metrics_text(router), name, labels).value_or(-1);
    };
    const std::string lookups = "pdrouter_discovery_resolutions_total";
    const std::string addresses = "pdrouter_discovery_addresses";
    EXPECT_GE(disc(lookups, {{"role", "decode"}, {"result", "ok"}}), 1);
    EXPECT_EQ(disc(addresses, {{"role", "decode"}}), 1);
    for (const char* role : {"prefill", "router"}) {
        for (const char* result : {"ok", "empty", "failed"}) {
            EXPECT_EQ(disc(lookups, {{"role", role}, {"result", result}}), 0) << role << result;
        }
        EXPECT_EQ(disc(addresses, {{"role", role}}), 0) << role;
    }

    // A second pod appears: probed, added, and it takes its share.
    publish("127.0.0.1 127.0.0.2");
    ASSERT_TRUE(wait_until(
        [&] {
            return listed(router) == std::vector<std::string>{a1, a2, p1};
        },
        Ms{5000}))
        << testing::PrintToString(listed(router));
    EXPECT_TRUE(wait_until([&] { return disc(addresses, {{"role", "decode"}}) == 2; }, Ms{5000}));
    for (int i = 0; i < 4; ++i) {
        body = completion_body("both " + std::to_string(i), 4, false);
        EXPECT_TRUE(answer_ok(send_generation(router, body), body));
    }
    EXPECT_GE(counter(sim_state(d2), "requests"), 2);

    // The first pod goes away with a stream on it: drained, the stream ends whole, and nothing
    // new goes there.
    sim_fault(d1, {{"token_delay_ms", 100}, {"count", -1}});
    Connection stream;
    const long long d1_before = counter(sim_state(d1), "requests");
    for (int i = 0; i < 2 && counter(sim_state(d1), "requests") == d1_before; ++i) {
        stream.close(true);
        stream = Connection();
        ASSERT_TRUE(open_stream(router, stream, i));
    }
    ASSERT_EQ(counter(sim_state(d1), "requests"), d1_before + 1);
    publish("127.0.0.2");
    ASSERT_TRUE(wait_until(
        [&] {
            return listed(router) == std::vector<std::string>{a1 + " removed", a2, p1};
        },
        Ms{5000}))
        << testing::PrintToString(listed(router));
    for (int i = 0; i < 3; ++i) {
        body = completion_body("after " + std::to_string(i), 4, false);
        EXPECT_TRUE(answer_ok(send_generation(router, body), body));
    }
    EXPECT_EQ(counter(sim_state(d1), "requests"), d1_before + 1);
    std::string rest, error;
    const auto deadline = Clock::now() + Ms{10000};
    bool eof = false, timed_out = false;
    while (rest.find("data: [DONE]") == std::string::npos && !eof && !timed_out) {
        rest += stream.read_some(deadline, eof, timed_out, error);
    }
    EXPECT_NE(rest.find("data: [DONE]"), std::string::npos) << rest;
    EXPECT_TRUE(wait_until(
        [&] {
            return listed(router) == std::vector<std::string>{a2, p1};
        },
        Ms{5000}))
        << testing::PrintToString(listed(router));

    // The name's source goes away (an unreadable hosts file): the lookups fail, counted, and the
    // instances stay as they were.
    const double failed = disc(lookups, {{"role", "decode"}, {"result", "failed"}});
    std::remove(hosts.c_str());
    EXPECT_TRUE(wait_until(
        [&] {
            return disc(lookups, {{"role", "decode"}, {"result", "failed"}}) > failed;
        },
        Ms{5000}));
    EXPECT_EQ(disc(addresses, {{"role", "decode"}}), 1);
    EXPECT_EQ(listed(router), (std::vector<std::string>{a2, p1}));
}

}  // namespace
}  // namespace pdr::test
