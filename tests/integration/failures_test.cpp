// Failure behaviour of the pull flow with real processes: upstream errors on either leg, dead
// instances, timeouts, missing KV params, mid-stream failures, and no stranded KV after any.
// Long: one fixture and its helpers serve every failure case; split, each file would repeat them.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "tests/support/checks.hpp"
#include "tests/support/fixture.hpp"

namespace pdr::test {
namespace {

using nlohmann::json;

class FailureTest : public ClusterTest {};

// Fast-failing settings shared by the failure tests. Health probes are slow so that an instance
// killed after start-up is still believed up when the request reaches it.
std::vector<std::string> fast_router(std::vector<std::string> extra = {}) {
    std::vector<std::string> a{"--kv-lease-timeout-ms", "600",  "--connect-timeout-ms", "500",
                               "--health-interval-ms",  "60000"};
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
}
const std::vector<std::string> kFastSim{"--kv-lease-seconds", "1"};

std::string error_message(const HttpResponse& r) {
    std::string msg;
    is_openai_error(r.body, &msg);
    return msg;
}

double upstream_errors(const Server& router, const std::string& leg) {
    return metric(metrics_text(router), "pdrouter_upstream_errors_total", {{"leg", leg}})
        .value_or(0);
}

TEST_F(FailureTest, Prefill4xxIsRelayedAndDecodeNotCalled) {
    auto& pd = start(PdOptions{}.sim(kFastSim).router(fast_router()));
    const std::string err =
        R"({"error":{"message":"prompt too long for pdsim","type":"BadRequestError","param":null,"code":400}})";
    sim_fault(*pd.prefill[0], {{"status", 400}, {"body", err}});
    json body = completion_body("p4xx", 4, false);
    auto r = send_generation(*pd.router, body);
    EXPECT_EQ(r.status, 400) << r.describe();
    EXPECT_EQ(r.body, err);
    EXPECT_FALSE(r.header("x-request-id").empty());
    EXPECT_EQ(counter(sim_state(*pd.decode[0]), "requests"), 0);
    // Stream requests get the same: the status is known before any SSE byte.
    sim_fault(*pd.prefill[0], {{"status", 422}, {"body", err}});
    auto rs = send_generation(*pd.router, chat_body("p4xx", 4, true));
    EXPECT_EQ(rs.status, 422) << rs.describe();
    EXPECT_EQ(rs.body, err);
    EXPECT_EQ(counter(sim_state(*pd.decode[0]), "requests"), 0);
    EXPECT_TRUE(kv_freed(pd, Ms{2000}));
    EXPECT_TRUE(no_violations(pd));
}

TEST_F(FailureTest, Prefill5xxRetriesOnTheOtherPrefill) {
    auto& pd = start(PdOptions{}.p(2).sim(kFastSim).router(fast_router()));
    sim_fault(*pd.prefill[0], {{"status", 500}, {"count", -1}});
    // Round robin: one of two requests picks the failing P first.
    for (int i = 0; i < 2; ++i) {
        json body = chat_body("retry me " + std::to_string(i), 5, i == 1);
        EXPECT_TRUE(answer_ok(send_generation(*pd.router, body), body)) << i;
    }
    EXPECT_GE(counter(sim_state(*pd.prefill[0]), "faults_applied"), 1);
    EXPECT_EQ(counter(sim_state(*pd.decode[0]), "requests"), 2);
    auto m = metrics_text(*pd.router);
    EXPECT_GE(metric(m, "pdrouter_retries_total", {{"leg", "prefill"}}).value_or(0), 1.0) << m;
    EXPECT_GE(
        metric(m, "pdrouter_upstream_errors_total", {{"leg", "prefill"}, {"kind", "status_5xx"}})
            .value_or(0),
        1.0)
        << m;
    EXPECT_TRUE(kv_freed(pd, Ms{2000}));
    EXPECT_TRUE(no_violations(pd));
}

TEST_F(FailureTest, PrefillAnswerThatIsNotJsonIsRetriedAndMarksThatPrefillDown) {
    auto& pd = start(PdOptions{}.p(2).sim(kFastSim).router(fast_router()));
    sim_fault(*pd.prefill[0], {{"status", 200}, {"body", "<html>oops</html>"}, {"count", -1}});
    // Every request succeeds: the one that picks the broken P first is retried on the other.
    for (int i = 0; i < 6; ++i) {
        json body = completion_body("not json " + std::to_string(i), 3, i % 2 == 1);
        EXPECT_TRUE(answer_ok(send_generation(*pd.router, body), body)) << i;
    }
    auto m = metrics_text(*pd.router);
    EXPECT_GE(metric(m, "pdrouter_retries_total", {{"leg", "prefill"}}).value_or(0), 1.0) << m;
    EXPECT_GE(
        metric(m, "pdrouter_upstream_errors_total", {{"leg", "prefill"}, {"kind", "protocol"}})
            .value_or(0),
        1.0)
        << m;
    // Three unparsable answers in a row mark it down, like three 5xx.
    const std::string p0 = pd.prefill[0]->address();
    for (int i = 0; i < 6 && counter(sim_state(*pd.prefill[0]), "faults_applied") < 3; ++i) {
        send_generation(*pd.router, completion_body("more " + std::to_string(i), 3, false));
    }
    EXPECT_GE(counter(sim_state(*pd.prefill[0]), "faults_applied"), 3);
    // (Its health probe may already have brought it back: /health is fine, so the log is
    // checked, not the gauge.)
    const std::string log = pd.router->proc.log();
    EXPECT_NE(log.find("prefill instance " + p0 +
                       " is down: sent an answer (HTTP 200) that is "
                       "not a JSON object"),
              std::string::npos)
        << log;
}

TEST_F(FailureTest, Prefill5xxWithOnePrefillIs502AndDecodeNotCalled) {
    auto& pd = start(PdOptions{}.sim(kFastSim).router(fast_router()));
    sim_fault(*pd.prefill[0], {{"status", 503}, {"count", -1}});
    auto r = send_generation(*pd.router, completion_body("no luck", 4, false));
    EXPECT_EQ(r.status, 502) << r.describe();
    EXPECT_TRUE(is_openai_error(r.body)) << r.body;
    EXPECT_EQ(counter(sim_state(*pd.decode[0]), "requests"), 0);
    EXPECT_TRUE(kv_freed(pd, Ms{2000}));
}

// One connection an engine drops before answering fails that request (a completion is never
// sent twice) but keeps the instance in rotation: with one instance per role, marking it down
// would have answered 503 to everyone until the next probe.
TEST_F(FailureTest, OneDroppedConnectionFailsOnlyItsRequest) {
    auto& pd = start(PdOptions{}.sim(kFastSim).router(fast_router()));
    sim_fault(*pd.decode[0], {{"close_before_response", true}, {"count", 1}});
    auto r1 = send_generation(*pd.router, completion_body("dropped by D", 3, false));
    EXPECT_EQ(r1.status, 502) << r1.describe();
    json b2 = completion_body("after D dropped one", 3, false);
    EXPECT_TRUE(answer_ok(send_generation(*pd.router, b2), b2));

    sim_fault(*pd.prefill[0], {{"close_before_response", true}, {"count", 1}});
    auto r3 = send_generation(*pd.router, chat_body("dropped by P", 3, true));
    EXPECT_EQ(r3.status, 502) << r3.describe();
    json b4 = chat_body("after P dropped one", 3, true);
    EXPECT_TRUE(answer_ok(send_generation(*pd.router, b4), b4));

    // Errors that are not in a row do not add up: a 4xx answer between them shows P works.
    for (int i = 0; i < 3; ++i) {
        sim_fault(*pd.prefill[0], {{"close_before_response", true}, {"count", 1}});
        auto dropped =
            send_generation(*pd.router, completion_body("dropped " + std::to_string(i), 2, false));
        EXPECT_EQ(dropped.status, 502) << dropped.describe();
        sim_fault(*pd.prefill[0], {{"status", 400}, {"count", 1}});
        auto refused =
            send_generation(*pd.router, completion_body("refused " + std::to_string(i), 2, false));
        EXPECT_EQ(refused.status, 400) << refused.describe();
    }
    json b5 = completion_body("P still in rotation", 3, false);
    EXPECT_TRUE(answer_ok(send_generation(*pd.router, b5), b5));

    // Both instances are still up (/health is 503 when a role has none).
    auto health = http_get(pd.router->port, "/health");
    EXPECT_EQ(health.status, 200) << health.describe();
    EXPECT_TRUE(kv_freed(pd, Ms{3000}));
    EXPECT_TRUE(no_violations(pd));
}

TEST_F(FailureTest, PrefillConnectFailureRetriesThenFails) {
    auto& pd = start(PdOptions{}.p(2).sim(kFastSim).router(fast_router()));
    // Kill one P after the router saw it up: its port refuses connections from now on.
    pd.prefill[1]->proc.kill_now();
    for (int i = 0; i < 2; ++i) {
        json body = completion_body("dead P " + std::to_string(i), 3, i == 0);
        EXPECT_TRUE(answer_ok(send_generation(*pd.router, body), body)) << i;
    }
    EXPECT_EQ(counter(sim_state(*pd.prefill[0]), "requests"), 2);
    auto m = metrics_text(*pd.router);
    std::cout << "prefill upstream errors after a dead P: "
              << metric(m, "pdrouter_upstream_errors_total", {{"leg", "prefill"}}).value_or(-1)
              << "\n";
    EXPECT_GE(upstream_errors(*pd.router, "prefill"), 1.0) << m;
    EXPECT_TRUE(kv_freed(pd, Ms{2000}));

    // Now the last P dies too: 502 (or 503 once both are known down), OpenAI shape, D untouched.
    pd.prefill[0]->proc.kill_now();
    auto d_before = counter(sim_state(*pd.decode[0]), "requests");
    auto r = send_generation(*pd.router, completion_body("all dead", 3, false));
    EXPECT_TRUE(r.status == 502 || r.status == 503) << r.describe();
    EXPECT_TRUE(is_openai_error(r.body)) << r.body;
    EXPECT_EQ(counter(sim_state(*pd.decode[0]), "requests"), d_before);
}

TEST_F(FailureTest, PrefillTimeoutIs504) {
    auto& pd =
        start(PdOptions{}.sim(kFastSim).router(fast_router({"--prefill-timeout-ms", "400"})));
    sim_fault(*pd.prefill[0], {{"delay_ms", 2000}, {"count", -1}});
    auto t0 = Clock::now();
    auto r = send_generation(*pd.router, chat_body("slow prefill", 3, true));
    double took = ms_between(t0, Clock::now());
    EXPECT_EQ(r.status, 504) << r.describe();
    EXPECT_TRUE(is_openai_error(r.body)) << r.body;
    EXPECT_LT(took, 1900.0) << "the router waited for the slow prefill";
    EXPECT_EQ(counter(sim_state(*pd.decode[0]), "requests"), 0);
    auto m = metrics_text(*pd.router);
    EXPECT_GE(metric(m, "pdrouter_upstream_errors_total", {{"leg", "prefill"}, {"kind", "timeout"}})
                  .value_or(0),
              1.0)
        << m;
    sim_reset(*pd.prefill[0]);
    EXPECT_TRUE(kv_freed(pd, Ms{3000}));
}

TEST_F(FailureTest, PrefillWithoutKvParamsIs502NamingThem) {
    auto& pd = start(PdOptions{}.sim(kFastSim).router(fast_router()));
    sim_fault(*pd.prefill[0], {{"omit_kv_params", true}});
    auto r = send_generation(*pd.router, completion_body("no handle", 3, false));
    EXPECT_EQ(r.status, 502) << r.describe();
    EXPECT_NE(error_message(r).find("kv_transfer_params"), std::string::npos) << r.body;
    EXPECT_EQ(counter(sim_state(*pd.decode[0]), "requests"), 0);
    auto m = metrics_text(*pd.router);
    EXPECT_GE(metric(m, "pdrouter_upstream_errors_total",
                     {{"leg", "prefill"}, {"kind", "missing_kv_params"}})
                  .value_or(0),
              1.0)
        << m;
    EXPECT_TRUE(kv_freed(pd, Ms{2000}));
}

TEST_F(FailureTest, PrefillWithoutKvParamsRecomputesWhenConfigured) {
    auto& pd = start(
        PdOptions{}.sim(kFastSim).router(fast_router({"--on-missing-kv-params", "recompute"})));
    sim_fault(*pd.prefill[0], {{"omit_kv_params", true}});
    json body = chat_body("recompute me", 7, true);
    auto r = send_generation(*pd.router, body, {{"X-Request-Id", "recompute-1"}});
    EXPECT_TRUE(answer_ok(r, body));
    auto d = sim_state(*pd.decode[0]);
    EXPECT_EQ(counter(d, "local_prefills"), 1) << d.dump();
    auto reqs = requests_with_id(*pd.decode[0], "recompute-1");
    ASSERT_EQ(reqs.size(), 1u);
    const auto& kv = reqs[0]["body"].value("kv_transfer_params", json());
    EXPECT_TRUE(kv.is_null()) << "decode got a handle: " << reqs[0]["body"].dump();
    auto m = metrics_text(*pd.router);
    EXPECT_GE(metric(m, "pdrouter_recomputes_total").value_or(0), 1.0) << m;
    EXPECT_TRUE(no_violations(pd));
}

TEST_F(FailureTest, DecodeConnectFailureRetriesOtherDecodeWithSameHandle) {
    auto& pd = start(PdOptions{}.d(2).sim(kFastSim).router(fast_router()));
    pd.decode[1]->proc.kill_now();
    for (int i = 0; i < 2; ++i) {
        json body = completion_body("dead D " + std::to_string(i), 4, i == 1);
        const std::string id = "dconn-" + std::to_string(i);
        auto r = send_generation(*pd.router, body, {{"X-Request-Id", id}});
        EXPECT_TRUE(answer_ok(r, body)) << i;
        auto d = requests_with_id(*pd.decode[0], id);
        ASSERT_EQ(d.size(), 1u) << id;
        EXPECT_EQ(d[0]["body"]["kv_transfer_params"].value("remote_request_id", ""), id);
        EXPECT_EQ(requests_with_id(*pd.prefill[0], id).size(), 1u) << "re-prefilled " << id;
    }
    EXPECT_GE(upstream_errors(*pd.router, "decode"), 1.0) << metrics_text(*pd.router);
    auto p = sim_state(*pd.prefill[0]);
    EXPECT_EQ(counter(p, "requests"), 2) << p.dump();
    EXPECT_EQ(counter(p, "freed_by_read"), 2) << p.dump();
    EXPECT_EQ(counter(sim_state(*pd.decode[0]), "kv_reads"), 2);
    EXPECT_TRUE(kv_freed(pd, Ms{2000}));
}

TEST_F(FailureTest, DecodeErrorsAreRelayed) {
    auto& pd = start(PdOptions{}.sim(kFastSim).router(fast_router()));
    const std::string err4 =
        R"({"error":{"message":"decode says no","type":"BadRequestError","param":null,"code":400}})";
    sim_fault(*pd.decode[0], {{"status", 400}, {"body", err4}});
    auto r4 = send_generation(*pd.router, completion_body("d4xx", 3, false));
    EXPECT_EQ(r4.status, 400) << r4.describe();
    EXPECT_EQ(r4.body, err4);

    const std::string err5 =
        R"({"error":{"message":"decode broke","type":"InternalServerError","param":null,"code":500}})";
    sim_fault(*pd.decode[0], {{"status", 500}, {"body", err5}});
    auto r5 = send_generation(*pd.router, chat_body("d5xx", 3, true));
    EXPECT_EQ(r5.status, 500) << r5.describe();
    EXPECT_EQ(r5.body, err5);
    EXPECT_EQ(counter(sim_state(*pd.prefill[0]), "requests"), 2);
    // D never read the blocks: P frees them (abort notice or one lease after the last refresh).
    EXPECT_TRUE(kv_freed(pd, Ms{3000}));
    auto m = metrics_text(*pd.router);
    EXPECT_GE(metric(m, "pdrouter_upstream_errors_total", {{"leg", "decode"}}).value_or(0), 2.0)
        << m;
}

TEST_F(FailureTest, DecodeTimeoutIs504AndAbortFreesTheBlocks) {
    // D holds the request (before reading the KV) longer than --decode-timeout-ms: the router
    // answers 504 and aborts D, and pdsim D releases P's blocks (vLLM behaviour on abort).
    auto& pd = start(PdOptions{}
                         .sim({"--kv-lease-seconds", "30"})
                         .router(fast_router({"--decode-timeout-ms", "400"})));
    sim_fault(*pd.decode[0], {{"delay_ms", 3000}});
    auto t0 = Clock::now();
    auto r = send_generation(*pd.router, completion_body("slow decode", 3, true));
    double took = ms_between(t0, Clock::now());
    EXPECT_EQ(r.status, 504) << r.describe();
    EXPECT_TRUE(is_openai_error(r.body)) << r.body;
    EXPECT_LT(took, 2500.0);
    auto m = metrics_text(*pd.router);
    EXPECT_GE(metric(m, "pdrouter_upstream_errors_total", {{"leg", "decode"}, {"kind", "timeout"}})
                  .value_or(0),
              1.0)
        << m;
    // The lease is 30 s here, so only the abort path can free the blocks in time.
    EXPECT_TRUE(kv_freed(pd, Ms{2000}));
    EXPECT_GE(counter(sim_state(*pd.prefill[0]), "freed_by_abort"), 1);
}

TEST_F(FailureTest, DecodeIdleMidStreamBecomesErrorEvent) {
    auto& pd =
        start(PdOptions{}.sim(kFastSim).router(fast_router({"--decode-idle-timeout-ms", "300"})));
    sim_fault(*pd.decode[0], {{"token_delay_ms", 1500}});
    json body = chat_body("idle stream", 4, true);
    auto t = http_request_timed(
        pd.router->port,
        HttpRequest{
            "POST", "/v1/chat/completions", {{"Content-Type", "application/json"}}, body.dump()},
        Ms{10000});
    EXPECT_EQ(t.response.status, 200) << t.response.describe();
    EXPECT_EQ(error_events(t.response.body).size(), 1u) << t.response.body;
    EXPECT_EQ(t.response.body.find("[DONE]"), std::string::npos) << t.response.body;
    EXPECT_LT(ms_between(t.sent, t.end_at), 1400.0) << "the idle timeout did not fire";
    EXPECT_TRUE(kv_freed(pd, Ms{2000}));
}

TEST_F(FailureTest, DecodeFailsMidStreamErrorEventNoDone) {
    auto& pd = start(PdOptions{}.sim(kFastSim).router(fast_router()));
    sim_fault(*pd.decode[0], {{"close_after_chunks", 3}});
    json body = completion_body("break mid stream", 10, true);
    auto t = http_request_timed(
        pd.router->port,
        HttpRequest{"POST", "/v1/completions", {{"Content-Type", "application/json"}}, body.dump()},
        Ms{10000});
    const auto& r = t.response;
    EXPECT_EQ(r.status, 200) << r.describe();
    EXPECT_NE(r.header("content-type").find("text/event-stream"), std::string::npos);
    auto events = sse_data(r.body);
    auto errors = error_events(r.body);
    EXPECT_EQ(errors.size(), 1u) << r.body;
    EXPECT_TRUE(std::find(events.begin(), events.end(), "[DONE]") == events.end()) << r.body;
    ASSERT_FALSE(events.empty());
    EXPECT_EQ(events.back(), errors.empty() ? "" : errors.back()) << "error must be last";
    EXPECT_GE(events.size(), 2u) << "events before the failure were not relayed: " << r.body;
    EXPECT_TRUE(t.closed_by_peer) << "the router kept the connection open after the error";
    auto m = metrics_text(*pd.router);
    EXPECT_GE(metric(m, "pdrouter_mid_stream_errors_total", {{"leg", "decode"}}).value_or(0), 1.0)
        << m;
    EXPECT_TRUE(kv_freed(pd, Ms{2000}));
}

// A 200 stream of `whole` events that each parse as JSON, then one error event, and nothing
// else: no half event, no stray blank line, no [DONE].
::testing::AssertionResult whole_events_then_one_error(const HttpResponse& r, std::size_t whole) {
    if (r.status != 200) {
        return ::testing::AssertionFailure() << r.describe();
    }
    auto events = sse_data(r.body);
    auto errors = error_events(r.body);
    if (errors.size() != 1 || events.size() != whole + 1 || events.back() != errors.back()) {
        return ::testing::AssertionFailure()
               << "want " << whole << " events then one error event: " << r.body;
    }
    for (const auto& e : events) {
        if (!json::parse(e, nullptr, false).is_object()) {
            return ::testing::AssertionFailure() << "not a whole event: " << e;
        }
    }
    if (!r.body.starts_with("data: ") || !r.body.ends_with("\n\n") ||
        r.body.find("\n\n\n") != std::string::npos) {
        return ::testing::AssertionFailure() << "stray bytes between events: " << r.body;
    }
    return ::testing::AssertionSuccess();
}

// The decode closes inside an event: the client never sees the half event (a strict client
// would fail on it before reading the error); the error event follows the last whole one.
// A decode that sends its own error event and then closes (pdsim on SIGTERM: its server ends
// the streams it drains with one) has told the client: the router adds no second error event.
TEST_F(FailureTest, DecodeOwnErrorEventIsTheOnlyOne) {
    auto& pd = start(PdOptions{}.sim({"--token-delay-ms", "50"}).router(fast_router()));
    const std::string d = pd.decode[0]->address();
    json body = chat_body("engine stops mid stream", 40, true);  // about 2 s of tokens
    HttpResponse r;
    std::thread client([&] { r = send_generation(*pd.router, body); });
    EXPECT_TRUE(wait_until(
        [&] {
            return metric(metrics_text(*pd.router), "pdrouter_time_to_first_byte_seconds_count")
                       .value_or(0) >= 1;
        },
        Ms{5000}));
    pd.decode[0]->proc.signal(SIGTERM);
    client.join();
    EXPECT_EQ(r.status, 200) << r.describe();
    EXPECT_EQ(error_events(r.body).size(), 1u) << r.body;
    EXPECT_EQ(r.body.find("[DONE]"), std::string::npos) << r.body;
    // The event says who stopped: the engine, not the router that relayed it.
    EXPECT_NE(r.body.find("the engine shut down before the stream ended"), std::string::npos)
        << r.body;
}

TEST_F(FailureTest, DecodeThatBreaksAfterDoneEndsTheStreamCleanly) {
    auto& pd = start(PdOptions{}.sim(kFastSim).router(fast_router()));
    // 3 tokens + [DONE] = 4 events; D closes right after [DONE], without ending the body.
    sim_fault(*pd.decode[0], {{"close_after_chunks", 4}});
    json body = completion_body("break after done", 3, true);
    auto r = send_generation(*pd.router, body);
    EXPECT_TRUE(answer_ok(r, body));  // a complete 200 with the whole text
    EXPECT_TRUE(error_events(r.body).empty()) << r.body;
    EXPECT_NE(r.body.find("[DONE]"), std::string::npos) << r.body;
    EXPECT_EQ(counter(sim_state(*pd.decode[0]), "faults_applied"), 1);
    auto m = metrics_text(*pd.router);
    EXPECT_GE(metric(m, "pdrouter_upstream_errors_total", {{"leg", "decode"}, {"kind", "read"}})
                  .value_or(0),
              1.0)
        << m;
    EXPECT_TRUE(kv_freed(pd, Ms{2000}));
}

TEST_F(FailureTest, DecodeFailsInsideAnEventErrorEventStandsAlone) {
    auto& pd = start(PdOptions{}.sim(kFastSim).router(fast_router()));
    sim_fault(*pd.decode[0], {{"close_after_chunks", 3}, {"cut_last_event", true}});
    json body = completion_body("break inside an event", 10, true);
    auto r = http_request(
        pd.router->port,
        HttpRequest{"POST", "/v1/completions", {{"Content-Type", "application/json"}}, body.dump()},
        Ms{10000});
    EXPECT_TRUE(whole_events_then_one_error(r, 2));
    EXPECT_TRUE(kv_freed(pd, Ms{2000}));
}

// Opens a client connection, sends `body`, waits for `ready`, then resets the connection and
// measures how long until `server`'s client_disconnects grows.
double disconnect_and_measure(const Server& router, const Server& server, const json& body,
                              const std::function<bool(Connection&)>& ready) {
    Connection c;
    std::string error;
    if (!c.connect(router.port, error) ||
        !c.write_all(
            serialize(
                {"POST", route_of(body), {{"Content-Type", "application/json"}}, body.dump()}),
            error)) {
        ADD_FAILURE() << error;
        return -1;
    }
    if (!ready(c)) {
        ADD_FAILURE() << "the request never reached the expected phase";
        return -1;
    }
    auto before = counter(sim_state(server), "client_disconnects");
    auto t0 = Clock::now();
    c.close(/*abort=*/true);
    bool seen = wait_until(
        [&] { return counter(sim_state(server), "client_disconnects") > before; }, Ms{3000}, Ms{5});
    double ms = ms_between(t0, Clock::now());
    EXPECT_TRUE(seen) << server.name << " never saw the upstream connection close";
    return ms;
}

TEST_F(FailureTest, ClientDisconnectDuringPrefillAbortsPrefill) {
    auto& pd = start(PdOptions{}.sim(kFastSim).router(fast_router()));
    sim_fault(*pd.prefill[0], {{"delay_ms", 5000}});
    json body = completion_body("bye during prefill", 5, true);
    double ms = disconnect_and_measure(*pd.router, *pd.prefill[0], body, [&](Connection&) {
        return wait_until([&] { return counter(sim_state(*pd.prefill[0]), "in_flight") == 1; },
                          Ms{3000});
    });
    std::cout << "prefill saw the disconnect after " << ms << " ms\n";
    EXPECT_GE(ms, 0.0);
    EXPECT_LT(ms, 1000.0);
    EXPECT_TRUE(wait_until(
        [&] {
            return metric(metrics_text(*pd.router), "pdrouter_client_disconnects_total",
                          {{"phase", "prefill"}})
                       .value_or(0) >= 1.0;
        },
        Ms{2000}))
        << metrics_text(*pd.router);
    EXPECT_EQ(counter(sim_state(*pd.decode[0]), "requests"), 0);
    EXPECT_TRUE(kv_freed(pd, Ms{3000}));
    // The router still serves.
    sim_reset(*pd.prefill[0]);
    json good = completion_body("after disconnect", 3, false);
    EXPECT_TRUE(answer_ok(send_generation(*pd.router, good), good));
}

TEST_F(FailureTest, ClientDisconnectDuringDecodeStreamAbortsDecode) {
    auto& pd = start(PdOptions{}.sim(kFastSim).router(fast_router()));
    sim_fault(*pd.decode[0], {{"token_delay_ms", 200}});
    json body = chat_body("bye during decode", 30, true);
    double ms = disconnect_and_measure(*pd.router, *pd.decode[0], body, [&](Connection& c) {
        // Read until the first SSE event has arrived.
        ResponseParser parser;
        auto deadline = Clock::now() + Ms{5000};
        std::string error;
        while (Clock::now() < deadline) {
            bool eof = false, timed_out = false;
            auto data = c.read_some(deadline, eof, timed_out, error);
            if (eof || timed_out || !parser.feed(data)) {
                return false;
            }
            if (parser.response().body.find("\n\n") != std::string::npos) {
                return true;
            }
        }
        return false;
    });
    std::cout << "decode saw the disconnect after " << ms << " ms\n";
    EXPECT_GE(ms, 0.0);
    EXPECT_LT(ms, 1000.0);
    EXPECT_TRUE(wait_until(
        [&] {
            return metric(metrics_text(*pd.router), "pdrouter_client_disconnects_total",
                          {{"phase", "decode"}})
                       .value_or(0) >= 1.0;
        },
        Ms{2000}))
        << metrics_text(*pd.router);
    EXPECT_TRUE(kv_freed(pd, Ms{2000}));
    EXPECT_TRUE(no_violations(pd));
}

struct BadInput {
    const char* name;
    std::string raw;  // full request bytes; "" → built from the fields below
    int status;
};

TEST_F(FailureTest, BadInputGetsOpenAiErrorsAndCostsNothing) {
    auto& pd = start(PdOptions{}.sim(kFastSim).router(fast_router({"--max-body-bytes", "4096"})));
    auto post = [](const std::string& target, const std::string& ct, const std::string& body) {
        return serialize({"POST", target, {{"Content-Type", ct}}, body});
    };
    const std::string model = std::string("\"model\":\"") + kModel + "\"";
    std::vector<BadInput> cases{
        {"non-JSON body", post("/v1/completions", "application/json", "{not json"), 400},
        {"array body", post("/v1/completions", "application/json", "[1,2,3]"), 400},
        {"text/plain", post("/v1/completions", "text/plain", "{" + model + ",\"prompt\":\"x\"}"),
         415},
        {"body over --max-body-bytes",
         post("/v1/completions", "application/json",
              "{" + model + ",\"prompt\":\"" + std::string(5000, 'a') + "\"}"),
         413},
        {"huge header",
         serialize({"POST",
                    "/v1/completions",
                    {{"Content-Type", "application/json"}, {"X-Big", std::string(20000, 'h')}},
                    "{" + model + ",\"prompt\":\"x\"}"}),
         431},
        {"unknown route", serialize({"GET", "/v1/nothing-here", {}, ""}), 404},
        {"GET on /v1/completions", serialize({"GET", "/v1/completions", {}, ""}), 405},
        {"missing model", post("/v1/completions", "application/json", R"({"prompt":"x"})"), 400},
        {"missing prompt", post("/v1/completions", "application/json", "{" + model + "}"), 400},
        {"missing messages", post("/v1/chat/completions", "application/json", "{" + model + "}"),
         400},
        {"messages not a list",
         post("/v1/chat/completions", "application/json", "{" + model + ",\"messages\":\"hi\"}"),
         400},
    };
    for (const auto& c : cases) {
        SCOPED_TRACE(c.name);
        auto r = http_raw(pd.router->port, c.raw, Ms{5000});
        EXPECT_EQ(r.status, c.status) << r.describe();
        EXPECT_TRUE(is_openai_error(r.body)) << r.describe();
        EXPECT_TRUE(pd.router->proc.running()) << "router died";
    }
    EXPECT_EQ(counter(sim_state(*pd.prefill[0]), "requests"), 0);
    EXPECT_EQ(counter(sim_state(*pd.decode[0]), "requests"), 0);
    auto m = metrics_text(*pd.router);
    EXPECT_GE(metric(m, "pdrouter_bad_requests_total").value_or(0), 8.0) << m;
    // rejected by the HTTP layer before any handler: counted too
    EXPECT_EQ(metric(m, "pdrouter_bad_requests_total", {{"code", "body_too_large"}}), 1.0) << m;
    EXPECT_EQ(metric(m, "pdrouter_bad_requests_total", {{"code", "headers_too_large"}}), 1.0) << m;
    json good = chat_body("still fine", 4, true);
    EXPECT_TRUE(answer_ok(send_generation(*pd.router, good), good));
}

// Two requests in flight with one client X-Request-Id would collide on the engines (the id is
// theirs on both legs): the second is refused with 409 before any upstream call; the first is
// untouched, and the id is free again once it is over.
TEST_F(FailureTest, SecondRequestWithAnIdInFlightGets409) {
    auto& pd = start(PdOptions{}.sim(kFastSim).router(fast_router()));
    sim_fault(*pd.decode[0], {{"token_delay_ms", 100}, {"count", 1}});
    json slow = completion_body("the first holder of the id", 6, true);
    HttpResponse first;
    std::thread client([&] {
        first = send_generation(*pd.router, slow, {{"X-Request-Id", "dup-1"}}, Ms{10000});
    });
    const bool decoding =
        wait_until([&] { return counter(sim_state(*pd.decode[0]), "requests") == 1; }, Ms{3000});
    EXPECT_TRUE(decoding) << "the first request never reached decode";
    json other = completion_body("a second one with the same id", 4, false);
    auto second = send_generation(*pd.router, other, {{"X-Request-Id", "dup-1"}}, Ms{5000});
    EXPECT_EQ(second.status, 409) << second.describe();
    EXPECT_TRUE(is_openai_error(second.body)) << second.describe();
    EXPECT_NE(second.body.find("duplicate_request_id"), std::string::npos) << second.body;
    EXPECT_EQ(second.header("x-request-id"), "dup-1");
    EXPECT_EQ(counter(sim_state(*pd.prefill[0]), "requests"), 1) << "the duplicate reached P";
    client.join();
    EXPECT_TRUE(answer_ok(first, slow));
    auto m = metrics_text(*pd.router);
    EXPECT_EQ(metric(m, "pdrouter_bad_requests_total", {{"code", "duplicate_request_id"}}), 1.0)
        << m;
    // Over: the id can be used again.
    EXPECT_TRUE(answer_ok(send_generation(*pd.router, other, {{"X-Request-Id", "dup-1"}}), other));
    EXPECT_TRUE(kv_freed(pd, Ms{2000}));
}

// --max-client-connections reaches the server: beyond it a new connection gets 503 and is
// closed; a kept-alive client that leaves frees its place at once. (No probe slots here: with
// them a /health past the limit is served, see ProbesAreServedWithEveryClientSlotTaken.)
TEST_F(FailureTest, ConnectionsBeyondMaxClientConnectionsGet503) {
    auto& pd = start(PdOptions{}.sim(kFastSim).router(
        fast_router({"--max-client-connections", "1", "--reserved-probe-connections", "0"})));
    HttpRequest health{"GET", "/health", {{"Connection", "keep-alive"}}, ""};
    {
        Connection held;
        std::string error;
        ASSERT_TRUE(held.connect(pd.router->port, error)) << error;
        auto first = http_exchange(held, health);
        EXPECT_EQ(first.status, 200) << first.describe();
        auto refused = http_get(pd.router->port, "/health");
        EXPECT_EQ(refused.status, 503) << refused.describe();
        EXPECT_TRUE(is_openai_error(refused.body)) << refused.body;
    }
    // `held` is closed: its place is free again well before any idle timeout. (The slot of each
    // connection the test closes is given back when the router sees the close, on whichever
    // worker thread holds it: a connection made right after may still find the one slot taken.)
    std::string m;
    EXPECT_TRUE(wait_until(
        [&] {
            const auto r = http_get(pd.router->port, "/metrics");
            m = r.body;
            return r.status == 200;
        },
        Ms{3000}));
    EXPECT_GE(
        metric(m, "pdrouter_bad_requests_total", {{"code", "too_many_connections"}}).value_or(0),
        1.0)
        << m;
}

// Opens `n` kept-alive connections, each served one /health (so the router holds all of them).
::testing::AssertionResult hold_connections(unsigned short port, int n,
                                            std::vector<std::unique_ptr<Connection>>& held) {
    HttpRequest health{"GET", "/health", {{"Connection", "keep-alive"}}, ""};
    for (int i = 0; i < n; ++i) {
        held.push_back(std::make_unique<Connection>());
        std::string error;
        if (!held.back()->connect(port, error)) {
            return ::testing::AssertionFailure() << "connect " << i << ": " << error;
        }
        const auto r = http_exchange(*held.back(), health);
        if (r.status != 200) {
            return ::testing::AssertionFailure() << "connection " << i << ": " << r.describe();
        }
    }
    return ::testing::AssertionSuccess();
}

// Every client slot taken (idle kept-alive connections): liveness and readiness probes and a
// scrape still get their answer on the reserved probe slots, a generation gets 503
// too_many_connections; once the probe slots are held too, a probe is refused as well.
TEST_F(FailureTest, ProbesAreServedWithEveryClientSlotTaken) {
    auto& pd = start(PdOptions{}.sim(kFastSim).router(
        fast_router({"--max-client-connections", "8", "--reserved-probe-connections", "2"})));
    std::vector<std::unique_ptr<Connection>> held;
    ASSERT_TRUE(hold_connections(pd.router->port, 8, held));
    auto probe = http_get(pd.router->port, "/health");
    EXPECT_EQ(probe.status, 200) << probe.describe();
    auto scrape = http_get(pd.router->port, "/metrics");
    EXPECT_EQ(scrape.status, 200) << scrape.describe();
    auto work = send_generation(*pd.router, completion_body("no slot left", 3, false));
    EXPECT_EQ(work.status, 503) << work.describe();
    EXPECT_NE(work.body.find("too_many_connections"), std::string::npos) << work.body;
    // /status is the Helm chart's liveness probe: served too (once the probe slots of the two
    // probes above are back, which the router sees on whichever worker holds them).
    // /v1/models is not a probe.
    HttpResponse status;
    EXPECT_TRUE(wait_until(
        [&] {
            status = http_get(pd.router->port, "/status");
            return status.status == 200;
        },
        Ms{3000}))
        << status.describe();
    auto models = http_get(pd.router->port, "/v1/models");
    EXPECT_EQ(models.status, 503) << models.describe();
    // Two idle connections hold both probe slots: now a probe is refused too. (The probe
    // slots of the probes above are given back when the router sees those connections end, on
    // whichever worker thread holds them: a connection made just before that is refused, so
    // the two are made again until they hold the slots.)
    const std::size_t clients = held.size();
    EXPECT_TRUE(wait_until(
        [&] {
            held.resize(clients);
            for (int i = 0; i < 2; ++i) {
                held.push_back(std::make_unique<Connection>());
                std::string error;
                if (!held.back()->connect(pd.router->port, error)) {
                    return false;
                }
            }
            return http_get(pd.router->port, "/health").status == 503;
        },
        Ms{3000}));
    held.clear();
    EXPECT_TRUE(wait_until(
        [&] {
            return send_generation(*pd.router, completion_body("room again", 3, false)).status ==
                   200;
        },
        Ms{3000}));
}

// A prefill whose kv_transfer_params is over --max-kv-params-bytes: the handle never reaches a
// decode, the error names the prefill, the limit and its flag, and no other prefill is tried (a
// handle grows with the prompt: another one would answer as big a handle) nor is P marked.
TEST_F(FailureTest, OversizedKvHandleIsAnsweredAtOnceNamingTheLimit) {
    auto& pd = start(
        PdOptions{}.p(2).sim(kFastSim).router(fast_router({"--max-kv-params-bytes", "65536"})));
    const json huge{{"id", "cmpl-x"},
                    {"object", "text_completion"},
                    {"choices", json::array()},
                    {"kv_transfer_params", {{"remote_block_ids", std::string(70000, '7')}}}};
    for (Server* p : pd.prefill) {
        sim_fault(*p, {{"status", 200}, {"body", huge.dump()}, {"count", 1}});
    }
    auto r = send_generation(*pd.router, completion_body("huge handle", 3, false));
    EXPECT_EQ(r.status, 502) << r.describe();
    const std::string msg = error_message(r);
    EXPECT_NE(msg.find("prefill instance 127.0.0.1:"), std::string::npos) << msg;
    EXPECT_NE(msg.find("over the --max-kv-params-bytes limit of 65536"), std::string::npos) << msg;
    EXPECT_EQ(sum_counter(pd.prefill, "requests"), 1) << "another prefill was tried";
    EXPECT_EQ(counter(sim_state(*pd.decode[0]), "requests"), 0) << "the handle reached decode";
    for (Server* p : pd.prefill) {
        sim_fault(*p, {{"count", 0}});
    }
    // P was not marked: both prefills serve the next ones.
    for (int i = 0; i < 2; ++i) {
        const json body = completion_body("small handle " + std::to_string(i), 3, false);
        EXPECT_TRUE(answer_ok(send_generation(*pd.router, body), body));
    }
    EXPECT_EQ(sum_counter(pd.prefill, "requests"), 3);
}

// A 1M-token prompt's handle (62,500 block ids of 16 tokens, ~500 KB as JSON) fits the
// default limit and reaches the decode whole.
TEST_F(FailureTest, AMillionTokenHandleFitsTheDefaultLimit) {
    auto& pd = start(PdOptions{}.sim(kFastSim).router(fast_router()));
    json ids = json::array();
    for (int i = 0; i < 62500; ++i) {
        ids.push_back(1000000 + i);
    }
    const json big{{"id", "cmpl-long"},
                   {"object", "text_completion"},
                   {"choices", json::array()},
                   {"kv_transfer_params",
                    {{"do_remote_prefill", true},
                     {"do_remote_decode", false},
                     {"remote_block_ids", ids},
                     {"remote_engine_id", "p-long"},
                     {"remote_host", "127.0.0.1"},
                     {"remote_port", 5600},
                     {"remote_request_id", "long-1"}}}};
    sim_fault(*pd.prefill[0], {{"status", 200}, {"body", big.dump()}, {"count", 1}});
    auto r = send_generation(*pd.router, completion_body("a long prompt", 3, false),
                             {{"X-Request-Id", "long-1"}});
    const auto seen = requests_with_id(*pd.decode[0], "long-1");
    ASSERT_EQ(seen.size(), 1u) << r.describe();
    EXPECT_EQ(seen[0]["body"]["kv_transfer_params"]["remote_block_ids"], ids);
}

// A whole decode answer over --max-upstream-body-bytes: 502 whose message names the limit and
// its flag, and the decode.
TEST_F(FailureTest, OversizedDecodeAnswerNamesTheLimit) {
    auto& pd =
        start(PdOptions{}.sim(kFastSim).router(fast_router({"--max-upstream-body-bytes", "4096"})));
    const json big{{"id", "cmpl-big"},
                   {"object", "text_completion"},
                   {"choices", {{{"index", 0}, {"text", std::string(8000, 'x')}}}}};
    sim_fault(*pd.decode[0], {{"status", 200}, {"body", big.dump()}});
    auto r = send_generation(*pd.router, completion_body("big answer", 3, false));
    EXPECT_EQ(r.status, 502) << r.describe();
    const std::string msg = error_message(r);
    EXPECT_NE(msg.find("--max-upstream-body-bytes limit of 4096 bytes"), std::string::npos) << msg;
    EXPECT_NE(msg.find(pd.decode[0]->address()), std::string::npos) << msg;
    EXPECT_TRUE(kv_freed(pd, Ms{3000}));
}

// Whole seconds since `t`, rounded up: a bound on the lines a once-a-second limit lets out.
std::size_t seconds_since(std::chrono::steady_clock::time_point t) {
    const auto ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t)
            .count();
    return static_cast<std::size_t>((ms + 999) / 1000);
}

std::size_t count_lines_with(const std::string& log, const std::string& what) {
    std::size_t n = 0;
    for (std::size_t at = log.find(what); at != std::string::npos; at = log.find(what, at + 1)) {
        ++n;
    }
    return n;
}

// Bad requests and wrong admin keys: one log line per second per kind, naming the client; the
// next line says how many were left out.
TEST_F(FailureTest, PerRequestWarningsAreRateLimitedAndNameTheClient) {
    auto& pd = start(PdOptions{}.sim(kFastSim).router(fast_router({"--admin-api-key", "k"})));
    const auto began = std::chrono::steady_clock::now();
    for (int i = 0; i < 40; ++i) {
        ASSERT_EQ(http_post(pd.router->port, "/v1/completions", "{not json").status, 400);
    }
    for (int i = 0; i < 10; ++i) {
        ASSERT_EQ(http_post_json(pd.router->port, "/instances/add", json{{"type", "decode"}},
                                 {{"X-API-Key", "wrong"}})
                      .status,
                  403);
    }
    // A second later the next line goes out, saying how many were left out.
    EXPECT_TRUE(wait_until(
        [&] {
            http_post(pd.router->port, "/v1/completions", "{not json");
            return pd.router->proc.log().find("similar lines left out)") != std::string::npos;
        },
        Ms{5000}));
    const std::string log = pd.router->proc.log();
    const std::size_t bad = count_lines_with(log, "bad request: invalid_json");
    EXPECT_GE(bad, 2u) << log;
    EXPECT_LE(bad, seconds_since(began) + 2) << "not rate-limited:\n" << log;
    EXPECT_NE(log.find("client=127.0.0.1:"), std::string::npos) << log;
    const std::size_t admin = count_lines_with(log, "admin authentication failed: wrong key");
    EXPECT_EQ(admin, 1u) << log;
    EXPECT_NE(log.find("on add from client=127.0.0.1:"), std::string::npos) << log;
}

// Requests the engines refuse: "request failed" lines at most once a second per leg and
// instance, naming the client; the next line says how many were left out.
TEST_F(FailureTest, RequestFailedLinesAreRateLimitedAndNameTheClient) {
    auto& pd = start(PdOptions{}.sim(kFastSim).router(fast_router()));
    sim_fault(*pd.decode[0], {{"status", 400}, {"count", 1000}});
    const auto began = std::chrono::steady_clock::now();
    for (int i = 0; i < 40; ++i) {
        ASSERT_EQ(send_generation(*pd.router, completion_body("refused", 3, false)).status, 400);
    }
    EXPECT_TRUE(wait_until(
        [&] {
            send_generation(*pd.router, completion_body("refused again", 3, false));
            return pd.router->proc.log().find("similar lines left out)") != std::string::npos;
        },
        Ms{5000}));
    const std::string log = pd.router->proc.log();
    const std::size_t failed = count_lines_with(log, "request failed: leg=decode");
    EXPECT_GE(failed, 2u) << log;
    EXPECT_LE(failed, seconds_since(began) + 2) << "not rate-limited:\n" << log;
    const auto line_at = log.find("request failed: leg=decode");
    ASSERT_NE(line_at, std::string::npos) << log;
    const std::string line = log.substr(line_at, log.find('\n', line_at) - line_at);
    EXPECT_NE(line.find("client=127.0.0.1:"), std::string::npos) << line;
    EXPECT_NE(line.find("reason=status 400"), std::string::npos) << line;
    // Refused prompts are a class of their own: a 500 from the same decode right after them
    // is logged all the same.
    sim_fault(*pd.decode[0], {{"status", 500}, {"count", 1}});
    EXPECT_EQ(send_generation(*pd.router, completion_body("broken", 3, false)).status / 100, 5);
    EXPECT_TRUE(wait_until(
        [&] { return pd.router->proc.log().find("reason=status 500") != std::string::npos; },
        Ms{3000}))
        << pd.router->proc.log();
}

// --log-level debug: one access-style line per request, with its status and the client's
// address.
TEST_F(FailureTest, AccessLinesNameTheClient) {
    auto& pd = start(PdOptions{}.sim(kFastSim).router(fast_router({"--log-level", "debug"})));
    const json body = completion_body("logged", 3, false);
    ASSERT_TRUE(answer_ok(send_generation(*pd.router, body), body));
    const std::string what = "POST /v1/completions 200 ";
    EXPECT_TRUE(wait_until([&] { return pd.router->proc.log().find(what) != std::string::npos; },
                           Ms{3000}));
    const std::string log = pd.router->proc.log();
    const auto at = log.find(what);
    ASSERT_NE(at, std::string::npos) << log;
    const std::string line = log.substr(at, log.find('\n', at) - at);
    EXPECT_NE(line.find("us client=127.0.0.1:"), std::string::npos) << line;
    EXPECT_NE(line.find("request_id="), std::string::npos) << line;
}

// --max-connections-per-source: one address past its share gets 503 (the message says why).
TEST_F(FailureTest, ConnectionsPerSourceAreLimited) {
    auto& pd =
        start(PdOptions{}.sim(kFastSim).router(fast_router({"--max-connections-per-source", "2"})));
    std::vector<std::unique_ptr<Connection>> held;
    ASSERT_TRUE(hold_connections(pd.router->port, 2, held));
    auto refused = http_get(pd.router->port, "/health");
    EXPECT_EQ(refused.status, 503) << refused.describe();
    EXPECT_NE(refused.body.find("from this address"), std::string::npos) << refused.body;
    held.pop_back();
    EXPECT_TRUE(
        wait_until([&] { return http_get(pd.router->port, "/health").status == 200; }, Ms{3000}));
}

// An engine's 429 (or 503) that says when to come back keeps its Retry-After on the way to the
// client, from either leg; the router's own 429 says it too.
TEST_F(FailureTest, RetryAfterReachesTheClient) {
    auto& pd = start(PdOptions{}.sim(kFastSim).router(fast_router()));
    sim_fault(*pd.decode[0], {{"status", 429}, {"retry_after_s", 7}});
    auto d = send_generation(*pd.router, completion_body("decode busy", 3, true));
    EXPECT_EQ(d.status, 429) << d.describe();
    EXPECT_EQ(d.header("retry-after"), "7") << d.describe();
    sim_fault(*pd.prefill[0], {{"status", 429}, {"retry_after_s", 3}});
    auto p = send_generation(*pd.router, chat_body("prefill busy", 3, false));
    EXPECT_EQ(p.status, 429) << p.describe();
    EXPECT_EQ(p.header("retry-after"), "3") << p.describe();
    auto plain = send_generation(*pd.router, completion_body("no header", 3, false));
    EXPECT_TRUE(answer_ok(plain, completion_body("no header", 3, false)));
    EXPECT_FALSE(plain.has_header("retry-after")) << plain.describe();
    EXPECT_TRUE(kv_freed(pd, Ms{3000}));
}

TEST_F(FailureTest, RouterOwn429SaysWhenToComeBack) {
    auto& pd =
        start(PdOptions{}.sim(kFastSim).router(fast_router({"--max-concurrent-requests", "1"})));
    sim_fault(*pd.decode[0], {{"token_delay_ms", 100}, {"count", 1}});
    json slow = completion_body("holds the only slot", 6, true);
    HttpResponse first;
    std::thread client([&] { first = send_generation(*pd.router, slow, {}, Ms{10000}); });
    const bool decoding =
        wait_until([&] { return counter(sim_state(*pd.decode[0]), "requests") == 1; }, Ms{3000});
    EXPECT_TRUE(decoding) << "the first request never reached decode";
    auto refused = send_generation(*pd.router, completion_body("one too many", 3, false));
    EXPECT_EQ(refused.status, 429) << refused.describe();
    EXPECT_EQ(refused.header("retry-after"), "1") << refused.describe();
    client.join();
    EXPECT_TRUE(answer_ok(first, slow));
    EXPECT_TRUE(kv_freed(pd, Ms{2000}));
}

// A decode that sends its stream unframed (an HTTP/1.0 body that only the close ends) and dies
// inside an event: the close looks like a clean end, but the half event is not passed on as if
// it were whole; the client gets the whole events, then the error event.
TEST_F(FailureTest, UnframedStreamClosedInsideAnEventEndsWithTheErrorEvent) {
    auto& pd = start(PdOptions{}.sim(kFastSim).router(fast_router()));
    sim_fault(*pd.decode[0],
              {{"close_delimited", true}, {"close_after_chunks", 3}, {"cut_last_event", true}});
    json body = completion_body("unframed and cut", 10, true);
    auto r = send_generation(*pd.router, body, {}, Ms{10000});
    EXPECT_TRUE(whole_events_then_one_error(r, 2));
    // Cut between events (the last whole event is not [DONE]): not a clean end either.
    sim_fault(*pd.decode[0], {{"close_delimited", true}, {"close_after_chunks", 2}});
    auto between = send_generation(*pd.router, body, {}, Ms{10000});
    EXPECT_TRUE(whole_events_then_one_error(between, 2));
    // The same engine, whole: relayed to the end.
    sim_fault(*pd.decode[0], {{"close_delimited", true}});
    auto whole = send_generation(*pd.router, body, {}, Ms{10000});
    EXPECT_TRUE(answer_ok(whole, body)) << whole.describe();
    EXPECT_TRUE(kv_freed(pd, Ms{2000}));
}

// An engine on raw sockets, for answers pdsim does not give. One connection at a time, one
// request per connection (answered with `Connection: close`): a GET gets a one-model list (the
// router's probes); a POST gets the scripted answer.
class RawEngine {
public:
    enum class Script {
        // One whole event, then 80 KiB of an event with no end, then the connection closes.
        CutInsideLongEvent,
        // Whole 1 KiB events as fast as the router takes them, until a write fails (the
        // router closed the leg), 64 MiB went out, or 20 s passed.
        Flood,
        // As soon as the request head is in: 413 with an OpenAI error body, then the connection
        // closes with the request body unread (a small receive buffer keeps the sender writing).
        EarlyAnswer413,
    };

    explicit RawEngine(Script script) : script_(script) {
        sockaddr_in addr{};
        addr.sin_family = AF_INET;
        addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        socklen_t len = sizeof addr;
        listener_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (listener_ < 0 || ::bind(listener_, reinterpret_cast<sockaddr*>(&addr), len) != 0 ||
            ::listen(listener_, 16) != 0 ||
            ::getsockname(listener_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
            throw std::runtime_error("RawEngine: listen failed");
        }
        port_ = ntohs(addr.sin_port);
        if (script_ == Script::EarlyAnswer413) {
            const int small = 4096;  // inherited by accepted sockets
            ::setsockopt(listener_, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
        }
        thread_ = std::thread([this] { serve(); });
    }
    ~RawEngine() {
        stop_ = true;
        thread_.join();
        ::close(listener_);
    }
    RawEngine(const RawEngine&) = delete;
    RawEngine& operator=(const RawEngine&) = delete;

    std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
    // Flood: a write failed, so the router closed the decode leg.
    bool leg_closed() const { return leg_closed_; }

private:
    void serve() {
        while (!stop_) {
            pollfd p{listener_, POLLIN, 0};
            if (::poll(&p, 1, 50) <= 0) {
                continue;
            }
            const int c = ::accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC);
            if (c < 0) {
                continue;
            }
            timeval tv{1, 0};
            ::setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
            ::setsockopt(c, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
            const std::string head = read_request(c, script_ != Script::EarlyAnswer413);
            if (head.rfind("GET ", 0) == 0) {
                const std::string models = R"({"object":"list","data":[{"id":"pdsim-model"}]})";
                send_all(c,
                         "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                         "Connection: close\r\nContent-Length: " +
                             std::to_string(models.size()) + "\r\n\r\n" + models);
            } else if (head.rfind("POST ", 0) == 0 && script_ == Script::EarlyAnswer413) {
                const std::string error =
                    R"({"error":{"message":"raw engine: request body too large",)"
                    R"("type":"invalid_request_error","param":null,"code":413}})";
                send_all(c,
                         "HTTP/1.1 413 Payload Too Large\r\nContent-Type: application/json\r\n"
                         "Connection: close\r\nContent-Length: " +
                             std::to_string(error.size()) + "\r\n\r\n" + error);
            } else if (head.rfind("POST ", 0) == 0) {
                stream(c);
            }
            ::close(c);
        }
    }

    // The request head ("" on a timeout or close); the body, if any, is read and dropped when
    // `read_body`.
    static std::string read_request(int c, bool read_body) {
        std::string in;
        char buf[4096];
        std::size_t end = std::string::npos;
        while ((end = in.find("\r\n\r\n")) == std::string::npos) {
            const ssize_t n = ::recv(c, buf, sizeof buf, 0);
            if (n <= 0 || in.size() > 65536) {
                return {};
            }
            in.append(buf, static_cast<std::size_t>(n));
        }
        if (!read_body) {
            return in.substr(0, end);
        }
        std::size_t body = 0;
        for (const char* name : {"Content-Length: ", "content-length: "}) {
            if (auto at = in.find(name); at != std::string::npos && at < end) {
                body = std::stoul(in.substr(at + std::strlen(name)));
            }
        }
        while (in.size() < end + 4 + body) {
            const ssize_t n = ::recv(c, buf, sizeof buf, 0);
            if (n <= 0) {
                return {};
            }
            in.append(buf, static_cast<std::size_t>(n));
        }
        return in.substr(0, end);
    }
    // False once a write fails (after retrying timeouts until `deadline`).
    static bool send_all(int c, const std::string& bytes,
                         std::chrono::steady_clock::time_point deadline =
                             std::chrono::steady_clock::now() + Ms{5000}) {
        std::size_t sent = 0;
        while (sent < bytes.size()) {
            const ssize_t n = ::send(c, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
            if (n > 0) {
                sent += static_cast<std::size_t>(n);
            } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) &&
                       std::chrono::steady_clock::now() < deadline) {
                continue;  // SO_SNDTIMEO: the router is not reading yet
            } else {
                return false;
            }
        }
        return true;
    }
    static std::string chunk(const std::string& data) {
        char size[32];
        std::snprintf(size, sizeof size, "%zx\r\n", data.size());
        return size + data + "\r\n";
    }

    void stream(int c) {
        const std::string head =
            "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n"
            "Connection: close\r\n\r\n";
        const std::string event =
            R"(data: {"id":"cmpl-raw","object":"text_completion","model":"pdsim-model",)"
            R"("choices":[{"index":0,"text":"first","finish_reason":null}]})"
            "\n\n";
        if (script_ == Script::CutInsideLongEvent) {
            send_all(c, head + chunk(event) + chunk("data: " + std::string(80 * 1024, 'x')));
            return;
        }
        const std::string padded = "data: {\"pad\":\"" + std::string(1000, 'y') + "\"}\n\n";
        const auto deadline = std::chrono::steady_clock::now() + Ms{20000};
        if (!send_all(c, head, deadline)) {
            leg_closed_ = true;
            return;
        }
        for (std::size_t sent = 0;
             sent < (64u << 20) && std::chrono::steady_clock::now() < deadline;
             sent += padded.size()) {
            if (!send_all(c, chunk(padded), deadline)) {
                leg_closed_ = true;
                return;
            }
        }
    }

    Script script_;
    int listener_ = -1;
    unsigned short port_ = 0;
    std::atomic<bool> stop_{false};
    std::atomic<bool> leg_closed_{false};
    std::thread thread_;
};

// An event over the cutter's 64 KiB cap is passed on before its end; when D stops inside it,
// an error event would end the cut event and deliver it as if whole, so the client connection
// is cut with the body unfinished, and a WARN line says why.
TEST_F(FailureTest, DecodeStoppingInsideAnEventOver64KiBCutsTheClientConnection) {
    RawEngine raw(RawEngine::Script::CutInsideLongEvent);
    auto& pd =
        start(PdOptions{}.d(0).sim(kFastSim).router(fast_router({"--decode", raw.address()})));
    auto r = send_generation(*pd.router, completion_body("one long event", 4, true), {}, Ms{10000});
    EXPECT_EQ(r.status, 200) << r.describe();
    EXPECT_FALSE(r.complete) << "the chunked body was ended as if whole: " << r.describe();
    EXPECT_NE(r.body.find("\"text\":\"first\""), std::string::npos) << r.describe();
    EXPECT_GE(r.body.size(), 64u * 1024) << "the over-long event was not passed on";
    EXPECT_EQ(r.body.find("\"error\""), std::string::npos) << "an error event ended the cut event";
    EXPECT_TRUE(wait_until(
        [&] {
            return pd.router->proc.log().find("stopped inside an event over") != std::string::npos;
        },
        Ms{3000}))
        << pd.router->proc.log();
}

// A prefill that answers before it has read the whole request (a 413 to a body over its limit)
// and closes: the router's write fails, but the answer is there, and it is what the client
// gets (a prefill's 4xx is relayed), not a 502 about the write.
TEST_F(FailureTest, EngineAnswerBeforeTheBodyWasReadIsRelayed) {
    RawEngine raw(RawEngine::Script::EarlyAnswer413);
    auto& pd = start(PdOptions{}.p(0).sim(kFastSim).router(
        fast_router({"--prefill", raw.address(), "--max-body-bytes", "16777216"})));
    json body = completion_body(std::string(8u << 20, 'a'), 4, false);
    auto r = send_generation(*pd.router, body, {}, Ms{15000});
    EXPECT_EQ(r.status, 413) << r.describe();
    EXPECT_NE(error_message(r).find("raw engine: request body too large"), std::string::npos)
        << r.describe();
    EXPECT_EQ(counter(sim_state(*pd.decode[0]), "requests"), 0) << "decode was called";
}

// The same on the decode leg: a decode that answers 413 before it has read the request (the
// prompt with P's handle) and closes. The client gets the decode's answer, and P's KV is freed.
TEST_F(FailureTest, DecodeAnswerBeforeTheBodyWasReadIsRelayed) {
    RawEngine raw(RawEngine::Script::EarlyAnswer413);
    auto& pd = start(PdOptions{}.d(0).sim(kFastSim).router(
        fast_router({"--decode", raw.address(), "--max-body-bytes", "16777216"})));
    // (6 MiB: under pdsim's 8 MiB body limit, so the prefill serves it.)
    json body = completion_body(std::string(6u << 20, 'a'), 4, false);
    auto r = send_generation(*pd.router, body, {}, Ms{15000});
    EXPECT_EQ(r.status, 413) << r.describe();
    EXPECT_NE(error_message(r).find("raw engine: request body too large"), std::string::npos)
        << r.describe();
    EXPECT_EQ(counter(sim_state(*pd.prefill[0]), "requests"), 1);
    EXPECT_TRUE(kv_freed(pd, Ms{3000}));
}

// --client-write-timeout-ms: a client that stops reading a stream (its socket buffer full) is
// dropped once one write waits that long; the decode leg is closed and counted as a disconnect.
TEST_F(FailureTest, ClientThatStopsReadingIsDroppedAfterTheWriteTimeout) {
    RawEngine raw(RawEngine::Script::Flood);
    auto& pd = start(PdOptions{}.d(0).sim(kFastSim).router(
        fast_router({"--decode", raw.address(), "--client-write-timeout-ms", "300"})));
    const int c = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ASSERT_GE(c, 0);
    const int small = 4096;  // before connect, so the window stays small
    ::setsockopt(c, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(pd.router->port);
    ASSERT_EQ(::connect(c, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    const std::string body = completion_body("never read", 4, true).dump();
    const std::string req =
        "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        "Content-Type: application/json\r\nContent-Length: " +
        std::to_string(body.size()) + "\r\n\r\n" + body;
    ASSERT_EQ(::send(c, req.data(), req.size(), MSG_NOSIGNAL), static_cast<ssize_t>(req.size()));
    // The client reads nothing from here on.
    const bool dropped = wait_until(
        [&] {
            return metric(metrics_text(*pd.router), "pdrouter_client_disconnects_total",
                          {{"phase", "decode"}})
                       .value_or(0) >= 1;
        },
        Ms{10000});
    EXPECT_TRUE(dropped) << metrics_text(*pd.router);
    EXPECT_TRUE(wait_until([&] { return raw.leg_closed(); }, Ms{5000}))
        << "the decode leg was left open";
    ::close(c);
}

TEST_F(FailureTest, UndeliveredHandleIsFreedOneLeaseAfterTheLastRefresh) {
    // D never takes the request (both Ds dead after start-up): P's blocks must not be stranded.
    auto& pd = start(PdOptions{}.sim(kFastSim).router(fast_router()));
    pd.decode[0]->proc.kill_now();
    auto r = send_generation(*pd.router, completion_body("nobody decodes", 4, false));
    EXPECT_TRUE(r.status == 502 || r.status == 503) << r.describe();
    EXPECT_TRUE(is_openai_error(r.body)) << r.body;
    EXPECT_EQ(counter(sim_state(*pd.prefill[0]), "requests"), 1);
    // Lease 1 s on pdsim; allow it plus slack.
    EXPECT_TRUE(kv_freed(pd, Ms{2500}));
}

// A loopback port where connects hang: a listener with backlog 0 whose one queue slot is taken,
// so the kernel drops further SYNs (the connect times out instead of being refused).
class BlackholePort {
public:
    BlackholePort() {
        sockaddr_in addr{};
        addr.sin_family = AF_INET;
        addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        socklen_t len = sizeof addr;
        listener_ = ::socket(AF_INET, SOCK_STREAM, 0);
        if (listener_ < 0 || ::bind(listener_, reinterpret_cast<sockaddr*>(&addr), len) != 0 ||
            ::listen(listener_, 0) != 0 ||
            ::getsockname(listener_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
            throw std::runtime_error("blackhole listener");
        }
        port_ = ntohs(addr.sin_port);
        filler_ = ::socket(AF_INET, SOCK_STREAM, 0);
        if (filler_ < 0 || ::connect(filler_, reinterpret_cast<sockaddr*>(&addr), len) != 0) {
            throw std::runtime_error("blackhole filler");
        }
    }
    ~BlackholePort() {
        ::close(filler_);
        ::close(listener_);
    }
    BlackholePort(const BlackholePort&) = delete;
    BlackholePort& operator=(const BlackholePort&) = delete;
    std::string address() const { return "127.0.0.1:" + std::to_string(port_); }

private:
    int listener_ = -1;
    int filler_ = -1;
    unsigned short port_ = 0;
};

TEST_F(FailureTest, HandleWhoseLeaseLapsedDuringDecodeRetriesIsNeverSentToDecode) {
    // Decode instances: a real one and one whose connects hang. Refreshes are off, so P's lease
    // (1.2 s as the router knows it) runs from P's answer; the hanging connect takes 1.5 s, so
    // by the retry the handle is no longer safe to hand over: 504, and D never sees it.
    BlackholePort hole;
    auto& pd = start(PdOptions{}.sim(kFastSim).router(
        {"--kv-lease-timeout-ms", "1200", "--no-lease-refresh", "--connect-timeout-ms", "1500",
         "--health-interval-ms", "60000", "--decode", hole.address()}));
    int refused = 0;
    int served = 0;
    for (int i = 0; i < 2; ++i) {  // round robin: one of the two picks the hanging instance first
        json body = completion_body("lease lapses " + std::to_string(i), 4, false);
        const std::string id = "lapse-" + std::to_string(i);
        auto r = send_generation(*pd.router, body, {{"X-Request-Id", id}});
        if (r.status == 504) {
            ++refused;
            EXPECT_NE(error_message(r).find("lease"), std::string::npos) << r.body;
            EXPECT_TRUE(requests_with_id(*pd.decode[0], id).empty()) << "handle sent to D";
            EXPECT_EQ(requests_with_id(*pd.prefill[0], id).size(), 1u);
        } else {
            ++served;
            EXPECT_TRUE(answer_ok(r, body)) << r.describe();
        }
    }
    EXPECT_EQ(refused, 1);
    EXPECT_EQ(served, 1);
    const std::string m = metrics_text(*pd.router);
    EXPECT_EQ(metric(m, "pdrouter_upstream_errors_total",
                     {{"leg", "decode"}, {"kind", "kv_lease_expiring"}})
                  .value_or(0),
              1.0)
        << m;
    // The refused handle's blocks go back when P's own lease (1 s) ends.
    EXPECT_TRUE(kv_freed(pd, Ms{3000}));
}

// Health probes every 200 ms that fail after 200 ms + 2 s; a down instance is re-probed every
// 200 ms.
const std::vector<std::string> kQuickProbes{
    "--connect-timeout-ms", "200", "--health-interval-ms", "200", "--health-backoff-max-ms", "200"};

// A pdsim stopped with SIGSTOP (its port still accepts; nothing answers), resumed with SIGCONT
// when the guard ends, on every way out of the test: no stopped process is left behind.
class StoppedSim {
public:
    explicit StoppedSim(Server& s) : s_(s) { s_.proc.signal(SIGSTOP); }
    ~StoppedSim() { resume(); }
    StoppedSim(const StoppedSim&) = delete;
    StoppedSim& operator=(const StoppedSim&) = delete;
    void resume() {
        if (stopped_) {
            stopped_ = false;
            s_.proc.signal(SIGCONT);
        }
    }

private:
    Server& s_;
    bool stopped_ = true;
};

// One request on its own thread: `first_event` once a streamed answer's first event arrived,
// then the whole answer (until its end, the router's close, or `timeout`: the client's deadline).
struct Watched {
    std::string id;
    json body;
    std::atomic<bool> first_event{false};
    HttpResponse response;
    Clock::time_point end_at{};
    std::jthread thread;  // joined on destruction, after at most `timeout`

    void start(unsigned short port, Ms timeout) {
        thread = std::jthread([this, port, timeout] {
            HttpRequest req{"POST", route_of(body), {{"X-Request-Id", id}}, body.dump()};
            req.headers.emplace_back("Content-Type", "application/json");
            Connection c;
            std::string error;
            ResponseParser parser;
            const auto deadline = Clock::now() + timeout;
            if (c.connect(port, error) && c.write_all(serialize(req), error)) {
                for (;;) {
                    bool eof = false, timed_out = false;
                    const std::string data = c.read_some(deadline, eof, timed_out, error);
                    if (!data.empty() && !parser.feed(data)) {
                        break;
                    }
                    if (parser.response().body.find("\n\n") != std::string::npos) {
                        first_event = true;
                    }
                    if (parser.done() || timed_out || !error.empty()) {
                        break;
                    }
                    if (eof) {
                        parser.eof();
                        break;
                    }
                }
            }
            response = parser.response();
            if (response.error.empty()) {
                response.error = error;
            }
            end_at = Clock::now();
        });
    }
};

// Issue 19 §1 #5: a decode stopped with requests on it. Once its health probe fails, the legs on
// it that have received nothing for the probe's timeout end at once: streams with one error event,
// a whole answer not yet begun with a 504, long before the client's deadline (or the router's
// own 120 s idle and 300 s decode timeouts). The other decode's requests go on, and new requests
// go to it.
TEST_F(FailureTest, LegsOnAStoppedDecodeEndWhenItsHealthCheckMarksItDown) {
    // Probe timeout: 200 ms connect + 2 s. A stream of 100 tokens takes 5 s.
    auto& pd = start(
        PdOptions{}.d(2).sim(kFastSim).decode_sim({"--token-delay-ms", "50"}).router(kQuickProbes));
    const Ms client_deadline{14000};
    // Started one by one, each once the previous one is on a decode: round robin puts streams
    // 0 and 2 and the first whole answer on one decode, the others on the other.
    std::vector<std::unique_ptr<Watched>> reqs;
    for (int i = 0; i < 6; ++i) {
        auto w = std::make_unique<Watched>();
        const bool stream = i < 4;
        w->id = (stream ? "stuck-s" : "stuck-n") + std::to_string(i);
        w->body = completion_body("stopped decode " + std::to_string(i), 100, stream);
        w->start(pd.router->port, client_deadline);
        Watched& started = *w;
        reqs.push_back(std::move(w));
        ASSERT_TRUE(wait_until(
            [&] {
                if (stream) {
                    return started.first_event.load();
                }
                return !requests_with_id(*pd.decode[0], started.id).empty() ||
                       !requests_with_id(*pd.decode[1], started.id).empty();
            },
            Ms{5000}))
            << started.id;
    }
    std::vector<Watched*> on_stopped, on_other;
    for (auto& w : reqs) {
        (requests_with_id(*pd.decode[0], w->id).empty() ? on_other : on_stopped).push_back(w.get());
    }
    ASSERT_EQ(on_stopped.size(), 3u);
    ASSERT_EQ(on_other.size(), 3u);

    StoppedSim stopped(*pd.decode[0]);
    const auto stopped_at = Clock::now();
    // Failed within: probe interval + probe timeout, or (a probe sent just before the stop) one
    // more backoff and probe timeout; plus slack for a loaded machine. Far below the deadline.
    const double bound_ms = 200 + 2200 + 200 + 2200 + 1500;
    for (Watched* w : on_stopped) {
        w->thread.join();
        const double took = ms_between(stopped_at, w->end_at);
        std::cout << w->id << " on the stopped decode ended " << took << " ms after the stop\n";
        EXPECT_LT(took, bound_ms) << w->id << ": " << w->response.describe();
        if (w->body.value("stream", false)) {
            EXPECT_EQ(w->response.status, 200) << w->response.describe();
            const auto events = sse_data(w->response.body);
            ASSERT_GE(events.size(), 2u) << w->response.body;  // tokens, then the error
            EXPECT_EQ(error_events(w->response.body).size(), 1u) << w->response.body;
            EXPECT_NE(events.back().find("upstream_timeout"), std::string::npos)
                << w->response.body;
            EXPECT_EQ(w->response.body.find("[DONE]"), std::string::npos) << w->response.body;
        } else {
            EXPECT_EQ(w->response.status, 504) << w->response.describe();
            EXPECT_TRUE(is_openai_error(w->response.body)) << w->response.body;
        }
    }
    // The other decode's requests were not touched.
    for (Watched* w : on_other) {
        w->thread.join();
        EXPECT_TRUE(answer_ok(w->response, w->body)) << w->id;
    }
    // New requests go to the decode that answers.
    for (int i = 0; i < 2; ++i) {
        json body = completion_body("after the stop " + std::to_string(i), 4, i == 0);
        const std::string id = "after-stop-" + std::to_string(i);
        EXPECT_TRUE(answer_ok(send_generation(*pd.router, body, {{"X-Request-Id", id}}), body));
        EXPECT_EQ(requests_with_id(*pd.decode[1], id).size(), 1u) << id;
    }
    const std::string m = metrics_text(*pd.router);
    EXPECT_EQ(metric(m, "pdrouter_legs_failed_on_down_total", {{"role", "decode"}}).value_or(-1),
              3.0)
        << m;
    EXPECT_EQ(metric(m, "pdrouter_legs_failed_on_down_total", {{"role", "prefill"}}).value_or(-1),
              0.0)
        << m;
    const std::string log = pd.router->proc.log();
    EXPECT_NE(log.find("decode instance " + pd.decode[0]->address() + " is down: failing "),
              std::string::npos)
        << log;
    stopped.resume();
    EXPECT_TRUE(kv_freed(pd, Ms{3000}));
}

// The prefill side of the same: a prefill leg on a stopped prefill has received nothing since it
// was sent, so the failed probe ends it at once and it is retried on the other prefill (nothing
// had reached the client), instead of waiting out --prefill-timeout-ms (300 s).
TEST_F(FailureTest, PrefillLegOnAStoppedPrefillIsRetriedWhenItsHealthCheckMarksItDown) {
    auto& pd = start(PdOptions{}
                         .p(2)
                         .sim(kFastSim)
                         .prefill_sim({"--prefill-delay-ms", "1500"})
                         .router(kQuickProbes));
    Watched w;
    w.id = "stuck-prefill";
    w.body = completion_body("stopped prefill", 4, false);
    w.start(pd.router->port, Ms{14000});
    Server* on = nullptr;
    ASSERT_TRUE(wait_until(
        [&] {
            for (Server* p : pd.prefill) {
                if (!requests_with_id(*p, w.id).empty()) {
                    on = p;
                }
            }
            return on != nullptr;
        },
        Ms{3000}));
    StoppedSim stopped(*on);
    const auto stopped_at = Clock::now();
    w.thread.join();
    const double took = ms_between(stopped_at, w.end_at);
    std::cout << "the request on the stopped prefill was answered " << took
              << " ms after the stop\n";
    EXPECT_TRUE(answer_ok(w.response, w.body)) << w.response.describe();
    // The probe fails (200 ms + 2.2 s, or one more round), then the other prefill takes 1.5 s.
    EXPECT_LT(took, 200 + 2200 + 200 + 2200 + 1500 + 1500.0);
    Server* other = on == pd.prefill[0] ? pd.prefill[1] : pd.prefill[0];
    EXPECT_EQ(requests_with_id(*other, w.id).size(), 1u);
    const std::string m = metrics_text(*pd.router);
    EXPECT_EQ(metric(m, "pdrouter_legs_failed_on_down_total", {{"role", "prefill"}}).value_or(-1),
              1.0)
        << m;
    EXPECT_GE(metric(m, "pdrouter_retries_total", {{"leg", "prefill"}}).value_or(0), 1.0) << m;
    stopped.resume();
    EXPECT_TRUE(kv_freed(pd, Ms{3000}));
}

}  // namespace
}  // namespace pdr::test
