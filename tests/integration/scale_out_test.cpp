// Scale-out with real processes: a load-aware decode policy steering around a slow decode
// (whose streams count as in flight until they end), selective disaggregation of short prompts,
// and the opt-in direct fallback when no prefill is up.
#include <gtest/gtest.h>

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

}  // namespace
}  // namespace pdr::test
