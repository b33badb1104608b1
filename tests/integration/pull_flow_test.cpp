// Pull flow (vLLM NixlConnector) through real pdrouter + pdsim processes: the exact rewrite of
// both legs, request ids, forwarded headers, SSE framing, round robin and concurrency.
#include <gtest/gtest.h>

#include <set>
#include <thread>

#include "tests/support/checks.hpp"
#include "tests/support/fixture.hpp"

namespace pdr::test {
namespace {

using nlohmann::json;

class PullFlowTest : public ClusterTest {};

// The prefill body pdrouter must send for `original` (PROTOCOLS.md §2).
json expected_prefill_body(json original) {
    original["stream"] = false;
    original.erase("stream_options");
    original["max_tokens"] = 1;
    if (original.contains("max_completion_tokens")) {
        original["max_completion_tokens"] = 1;
    }
    original.erase("min_tokens");
    original.erase("min_completion_tokens");
    original["kv_transfer_params"] = {{"do_remote_decode", true},    {"do_remote_prefill", false},
                                      {"remote_engine_id", nullptr}, {"remote_block_ids", nullptr},
                                      {"remote_host", nullptr},      {"remote_port", nullptr}};
    return original;
}

struct Case {
    bool chat;
    bool stream;
};

// One request through 1P1D with every field the rewrite touches; checks both legs' bodies and
// headers, the answer bytes and the request id.
void check_one_flow(PdCluster& pd, const Case& c, int n) {
    const std::string id =
        "client-req-" + std::to_string(n) + (c.chat ? "-chat" : "-cmpl") + (c.stream ? "-s" : "-n");
    json body = c.chat ? chat_body("Tell me about rivers number " + std::to_string(n), 12, c.stream)
                       : completion_body("Once upon a time " + std::to_string(n), 12, c.stream);
    body["temperature"] = 0.5;
    body["user"] = "opaque-user";
    body["min_tokens"] = 2;
    body["vendor_extension"] = {{"nested", json::array({1, 2, 3})}};
    if (c.chat) {
        body["max_completion_tokens"] = 12;
    }
    if (c.stream) {
        body["stream_options"] = {{"include_usage", true}};
    }
    const std::string traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    Headers headers{{"X-Request-Id", id},
                    {"Authorization", "Bearer client-key"},
                    {"traceparent", traceparent},
                    {"tracestate", "vendor=opaque"}};
    auto r = send_generation(*pd.router, body, headers);
    EXPECT_TRUE(answer_ok(r, body));
    EXPECT_EQ(r.header("x-request-id"), id);
    if (c.stream) {
        // stream_options.include_usage reached D: its usage chunk is relayed before [DONE].
        auto events = sse_data(r.body);
        ASSERT_GE(events.size(), 2u) << r.body;
        auto usage = json::parse(events[events.size() - 2], nullptr, false);
        EXPECT_TRUE(usage.is_object() && usage.contains("usage") && usage["usage"].is_object())
            << "no usage chunk before [DONE]: " << r.body;
    }

    auto p_reqs = requests_with_id(*pd.prefill[0], id);
    auto d_reqs = requests_with_id(*pd.decode[0], id);
    ASSERT_EQ(p_reqs.size(), 1u) << "prefill requests with id " << id;
    ASSERT_EQ(d_reqs.size(), 1u) << "decode requests with id " << id;
    const auto& p = p_reqs[0];
    const auto& d = d_reqs[0];
    EXPECT_EQ(p["path"], route_of(body));
    EXPECT_EQ(d["path"], route_of(body));
    EXPECT_EQ(p["body"], expected_prefill_body(body)) << "prefill body: " << p["body"].dump();

    // Decode body: the original, plus P's handle verbatim.
    ASSERT_TRUE(d["body"].contains("kv_transfer_params")) << d["body"].dump();
    json handle = d["body"]["kv_transfer_params"];
    json d_rest = d["body"];
    d_rest.erase("kv_transfer_params");
    EXPECT_EQ(d_rest, body) << "decode body changed beyond kv_transfer_params";
    EXPECT_EQ(handle.value("do_remote_prefill", false), true) << handle.dump();
    EXPECT_EQ(handle.value("do_remote_decode", true), false) << handle.dump();
    EXPECT_EQ(handle.value("remote_request_id", ""), id) << handle.dump();
    EXPECT_EQ(handle.value("remote_port", 0), pd.prefill[0]->port) << handle.dump();
    EXPECT_EQ(handle.value("transfer_mode", ""), "pull") << handle.dump();
    EXPECT_EQ(handle.value("remote_host", ""), "127.0.0.1") << handle.dump();
    EXPECT_EQ(handle.value("remote_engine_id", ""),
              sim_state(*pd.prefill[0]).value("engine_id", "?"))
        << handle.dump();
    for (const char* key : {"remote_block_ids", "remote_engine_id", "remote_host", "tp_size",
                            "pp_size", "remote_num_tokens"}) {
        EXPECT_TRUE(handle.contains(key) && !handle[key].is_null())
            << key << " in " << handle.dump();
    }

    for (const auto* leg : {&p, &d}) {
        EXPECT_EQ(recorded_header(*leg, "authorization"), "Bearer client-key");
        EXPECT_EQ(recorded_header(*leg, "traceparent"), traceparent);
        EXPECT_EQ(recorded_header(*leg, "tracestate"), "vendor=opaque");
        EXPECT_NE(recorded_header(*leg, "content-type").find("application/json"),
                  std::string::npos);
    }
}

TEST_F(PullFlowTest, OneByOneAllShapesRewriteAndHeaders) {
    auto& pd = start(PdOptions{}.p(1).d(1));
    int n = 0;
    for (Case c : {Case{false, false}, Case{false, true}, Case{true, false}, Case{true, true}}) {
        SCOPED_TRACE(std::string(c.chat ? "chat" : "completions") +
                     (c.stream ? " stream" : " non-stream"));
        check_one_flow(pd, c, n++);
    }
    EXPECT_TRUE(no_violations(pd));
    EXPECT_TRUE(kv_freed(pd, Ms{2000}));
    auto p = sim_state(*pd.prefill[0]);
    auto d = sim_state(*pd.decode[0]);
    EXPECT_EQ(counter(p, "requests"), 4) << p.dump();
    EXPECT_EQ(counter(d, "requests"), 4) << d.dump();
    EXPECT_EQ(counter(d, "kv_reads"), 4) << d.dump();
    EXPECT_EQ(counter(d, "kv_read_failures"), 0) << d.dump();
    EXPECT_EQ(counter(d, "local_prefills"), 0) << d.dump();
    EXPECT_EQ(counter(p, "freed_by_read"), 4) << p.dump();
}

TEST_F(PullFlowTest, FreshUuidRequestIdWhenClientSendsNone) {
    auto& pd = start(PdOptions{}.p(1).d(1));
    std::set<std::string> ids;
    for (bool stream : {false, true}) {
        json body = completion_body("no id here", 5, stream);
        auto r = send_generation(*pd.router, body);
        EXPECT_TRUE(answer_ok(r, body));
        const std::string id = r.header("x-request-id");
        EXPECT_TRUE(is_uuid_v4(id)) << "X-Request-Id '" << id << "'";
        EXPECT_EQ(requests_with_id(*pd.prefill[0], id).size(), 1u) << id;
        EXPECT_EQ(requests_with_id(*pd.decode[0], id).size(), 1u) << id;
        ids.insert(id);
    }
    EXPECT_EQ(ids.size(), 2u) << "ids must differ per request";
    // Router-made responses carry one too.
    auto r404 = http_get(pd.router->port, "/no/such/route");
    EXPECT_TRUE(is_uuid_v4(r404.header("x-request-id"))) << r404.describe();
    EXPECT_TRUE(no_violations(pd));
}

TEST_F(PullFlowTest, UpstreamApiKeyReplacesClientAuthorization) {
    auto& pd = start(PdOptions{}.p(1).d(1).router({"--upstream-api-key", "up-key"}));
    json body = chat_body("keys", 4, false);
    auto r = send_generation(*pd.router, body,
                             {{"X-Request-Id", "auth-1"}, {"Authorization", "Bearer client-key"}});
    EXPECT_TRUE(answer_ok(r, body));
    for (auto* s : {pd.prefill[0], pd.decode[0]}) {
        auto reqs = requests_with_id(*s, "auth-1");
        ASSERT_EQ(reqs.size(), 1u) << s->name;
        EXPECT_EQ(recorded_header(reqs[0], "authorization"), "Bearer up-key") << s->name;
    }
}

TEST_F(PullFlowTest, RoundRobinSpreadsOver2P2D) {
    auto& pd = start(PdOptions{}.p(2).d(2));
    for (int i = 0; i < 8; ++i) {
        json body = i % 2 ? chat_body("rr " + std::to_string(i), 3, i % 3 == 0)
                          : completion_body("rr " + std::to_string(i), 3, i % 3 == 0);
        EXPECT_TRUE(answer_ok(send_generation(*pd.router, body), body)) << i;
    }
    for (auto* s : {pd.prefill[0], pd.prefill[1], pd.decode[0], pd.decode[1]}) {
        long long n = counter(sim_state(*s), "requests");
        std::cout << s->name << " :" << s->port << " served " << n << " of 8\n";
        EXPECT_GE(n, 3) << s->name << " got too few requests for round robin";
        EXPECT_LE(n, 5) << s->name << " got too many requests for round robin";
    }
    EXPECT_EQ(sum_counter(pd.decode, "kv_reads"), 8);
    EXPECT_TRUE(no_violations(pd));
    EXPECT_TRUE(kv_freed(pd, Ms{2000}));
}

TEST_F(PullFlowTest, SixtyFourConcurrentMixedRequestsByteExact) {
    auto& pd = start(PdOptions{}.p(2).d(2));
    constexpr int kN = 64;
    std::vector<json> bodies;
    for (int i = 0; i < kN; ++i) {
        const bool stream = i % 2 == 0;
        const int max_tokens = 4 + i % 13;
        const std::string prompt = "concurrent prompt " + std::to_string(i) + " with some words";
        bodies.push_back(i % 4 < 2 ? completion_body(prompt, max_tokens, stream)
                                   : chat_body(prompt, max_tokens, stream));
    }
    std::vector<HttpResponse> answers(kN);
    std::vector<std::thread> threads;
    auto t0 = Clock::now();
    for (int i = 0; i < kN; ++i) {
        threads.emplace_back([&, i] {
            answers[i] = send_generation(
                *pd.router, bodies[i], {{"X-Request-Id", "conc-" + std::to_string(i)}}, Ms{30000});
        });
    }
    for (auto& t : threads) {
        t.join();
    }
    std::cout << kN << " concurrent requests took " << ms_between(t0, Clock::now()) << " ms\n";
    int ok = 0;
    for (int i = 0; i < kN; ++i) {
        auto res = answer_ok(answers[i], bodies[i]);
        EXPECT_TRUE(res) << "request " << i << " " << bodies[i].dump();
        EXPECT_EQ(answers[i].header("x-request-id"), "conc-" + std::to_string(i));
        ok += res ? 1 : 0;
    }
    EXPECT_EQ(ok, kN);
    EXPECT_EQ(sum_counter(pd.prefill, "requests"), kN);
    EXPECT_EQ(sum_counter(pd.decode, "requests"), kN);
    EXPECT_EQ(sum_counter(pd.decode, "kv_reads"), kN);
    EXPECT_EQ(sum_counter(pd.decode, "kv_read_failures"), 0);
    for (auto* s : {pd.prefill[0], pd.prefill[1], pd.decode[0], pd.decode[1]}) {
        EXPECT_GT(counter(sim_state(*s), "requests"), 0) << s->name << " got no traffic";
    }
    EXPECT_TRUE(no_violations(pd));
    EXPECT_TRUE(kv_freed(pd, Ms{3000}));
}

TEST_F(PullFlowTest, FirstSseEventArrivesBeforeDecodeFinishes) {
    auto& pd = start(PdOptions{}.p(1).d(1));
    sim_fault(*pd.decode[0], {{"token_delay_ms", 100}, {"count", 1}});
    json body = completion_body("stream me slowly", 10, true);
    HttpRequest req{"POST", "/v1/completions", {{"Content-Type", "application/json"}}, body.dump()};
    auto t = http_request_timed(pd.router->port, req, Ms{15000});
    EXPECT_TRUE(answer_ok(t.response, body));
    ASSERT_TRUE(t.saw_first_event) << t.response.describe();
    const double first = ms_between(t.sent, t.first_event_at);
    const double total = ms_between(t.sent, t.end_at);
    std::cout << "first SSE event after " << first << " ms, stream ended after " << total
              << " ms (10 tokens x 100 ms)\n";
    EXPECT_GE(total, 900.0) << "the token delay fault did not apply";
    EXPECT_LT(first, total - 500.0) << "the first event was held back (buffered stream)";
    EXPECT_EQ(counter(sim_state(*pd.decode[0]), "faults_applied"), 1);
    EXPECT_TRUE(kv_freed(pd, Ms{2000}));
}

TEST_F(PullFlowTest, HeadThatCameWithPartOfAnEventIsNotHeldForTheRest) {
    // D's head arrives in one write with the first half of its first event; the other half
    // comes 1 s later. The router holds a head only to send it with whole events: with none
    // there, the client must get the head at once, not when that event is complete.
    auto& pd = start(PdOptions{}.p(1).d(1));
    sim_fault(*pd.decode[0], {{"split_first_event_ms", 1000}, {"count", 1}});
    json body = completion_body("split my first event", 4, true);
    HttpRequest req{"POST", "/v1/completions", {{"Content-Type", "application/json"}}, body.dump()};
    auto t = http_request_timed(pd.router->port, req, Ms{15000});
    EXPECT_TRUE(answer_ok(t.response, body));
    ASSERT_TRUE(t.saw_first_event) << t.response.describe();
    const double head = ms_between(t.sent, t.head_at);
    const double first = ms_between(t.sent, t.first_event_at);
    std::cout << "head after " << head << " ms, first whole event after " << first << " ms\n";
    EXPECT_GE(first, 900.0) << "the split fault did not apply";
    EXPECT_LT(head, first - 500.0) << "the head waited for the rest of the first event";
    EXPECT_EQ(counter(sim_state(*pd.decode[0]), "faults_applied"), 1);
    // The same events as without the fault.
    auto plain = send_generation(*pd.router, body);
    EXPECT_TRUE(answer_ok(plain, body));
    EXPECT_EQ(sse_data(t.response.body).size(), sse_data(plain.body).size());
    EXPECT_TRUE(kv_freed(pd, Ms{2000}));
}

TEST_F(PullFlowTest, LeaseKeptAliveWhileDecodeIsDelayed) {
    // pdsim's lease is 1 s; decode waits 2.5 s before touching the KV. Only the router's
    // refreshes (every 600/3 ms) keep P's blocks alive.
    auto& pd = start(PdOptions{}
                         .p(1)
                         .d(1)
                         .sim({"--kv-lease-seconds", "1"})
                         .router({"--kv-lease-timeout-ms", "600"}));
    sim_fault(*pd.decode[0], {{"delay_ms", 2500}, {"count", 1}});
    json body = chat_body("keep my blocks", 6, true);
    auto r = send_generation(*pd.router, body, {{"X-Request-Id", "lease-1"}});
    EXPECT_TRUE(answer_ok(r, body));
    auto p = sim_state(*pd.prefill[0]);
    auto d = sim_state(*pd.decode[0]);
    EXPECT_GT(counter(p, "lease_refreshes"), 0) << p.dump();
    EXPECT_EQ(counter(p, "freed_by_expiry"), 0) << p.dump();
    EXPECT_EQ(counter(d, "kv_read_failures"), 0) << d.dump();
    EXPECT_EQ(counter(d, "kv_reads"), 1) << d.dump();
    auto m = metrics_text(*pd.router);
    EXPECT_GT(metric(m, "pdrouter_lease_refresh_sent_total").value_or(0), 0) << m;
    EXPECT_TRUE(no_violations(pd));
    EXPECT_TRUE(kv_freed(pd, Ms{2000}));
    // Once decode is over the router stops refreshing.
    auto calls = counter(sim_state(*pd.prefill[0]), "lease_refresh_calls");
    std::this_thread::sleep_for(Ms{500});  // > 2 refresh periods: a running refresher would show
    EXPECT_EQ(counter(sim_state(*pd.prefill[0]), "lease_refresh_calls"), calls);
}

// A prefill as merged vLLM: no lease route (404); its leases are its own (the decode renews
// them with NIXL heartbeats). The router asks once, says so once in its log and in
// GET /instances and /status, and stops posting: three requests that each wait 1.2 s for the
// decode (six refresh periods each) make one refresh call, not eighteen.
TEST_F(PullFlowTest, APrefillWithoutTheLeaseRouteIsAskedOnceThenLeftAlone) {
    const Headers admin{{"X-API-Key", "lease-admin-key"}};
    auto& pd =
        start(PdOptions{}
                  .p(1)
                  .d(1)
                  .sim({"--kv-lease-seconds", "30"})
                  .prefill_sim({"--lease-route", "off"})
                  .router({"--kv-lease-timeout-ms", "600", "--admin-api-key", "lease-admin-key"}));
    sim_fault(*pd.decode[0], {{"delay_ms", 1200}, {"count", 3}});
    for (int i = 0; i < 3; ++i) {
        json body = chat_body("no lease route " + std::to_string(i), 4, i % 2 == 0);
        auto r = send_generation(*pd.router, body);
        EXPECT_TRUE(answer_ok(r, body)) << r.describe();
    }
    EXPECT_EQ(counter(sim_state(*pd.prefill[0]), "lease_refresh_calls"), 1);
    EXPECT_EQ(counter(sim_state(*pd.prefill[0]), "lease_refreshes"), 0);
    auto m = metrics_text(*pd.router);
    EXPECT_EQ(metric(m, "pdrouter_lease_refresh_requests_total", {{"result", "no_route"}}), 1) << m;
    EXPECT_EQ(metric(m, "pdrouter_lease_refresh_requests_total", {{"result", "error"}}), 0);
    EXPECT_EQ(metric(m, "pdrouter_lease_refresh_route_absent"), 1);
    const json listed = http_get(pd.router->port, "/instances", admin).json();
    int prefills = 0;
    for (const auto& inst : listed) {
        if (inst["role"] == "prefill") {
            ++prefills;
            EXPECT_EQ(inst["lease_refresh"], "absent") << listed.dump();
        } else {
            EXPECT_FALSE(inst.contains("lease_refresh")) << listed.dump();
        }
    }
    EXPECT_EQ(prefills, 1);
    const json status = http_get(pd.router->port, "/status").json();
    ASSERT_EQ(status["prefill_leases"].size(), 1u) << status.dump();
    EXPECT_EQ(status["prefill_leases"][0]["lease_refresh"], "absent") << status.dump();
    const std::string log = pd.router->proc.log();
    std::size_t said = 0;
    for (auto at = log.find("has no /internal/nixl/lease_refresh route"); at != std::string::npos;
         at = log.find("has no /internal/nixl/lease_refresh route", at + 1)) {
        ++said;
    }
    EXPECT_EQ(said, 1u) << log;
    EXPECT_TRUE(no_violations(pd));
    EXPECT_TRUE(kv_freed(pd, Ms{2000}));
}

// The handle D got for the request with X-Request-Id `id`.
json decode_handle(const Server& d, const std::string& id) {
    auto reqs = requests_with_id(d, id);
    if (reqs.size() != 1 || !reqs[0]["body"].contains("kv_transfer_params")) {
        return json();
    }
    return reqs[0]["body"]["kv_transfer_params"];
}

TEST_F(PullFlowTest, ALoopbackKvHostIsRewrittenToThePrefillAddress) {
    // P says "localhost" (vLLM with VLLM_NIXL_SIDE_CHANNEL_HOST unset): D gets the address the
    // router reached P at, as vLLM's demo proxy does.
    auto& pd = start(PdOptions{}.p(1).d(1).prefill_sim({"--kv-host", "localhost"}));
    for (bool stream : {false, true}) {
        const std::string id = std::string("kv-host-auto-") + (stream ? "s" : "n");
        json body = completion_body("rewrite my kv host", 4, stream);
        auto r = send_generation(*pd.router, body, {{"X-Request-Id", id}});
        EXPECT_TRUE(answer_ok(r, body)) << r.describe();
        const json handle = decode_handle(*pd.decode[0], id);
        EXPECT_EQ(handle.value("remote_host", ""), "127.0.0.1") << handle.dump();
        EXPECT_EQ(handle.value("remote_port", 0), pd.prefill[0]->port) << handle.dump();
    }
    EXPECT_EQ(metric(metrics_text(*pd.router), "pdrouter_kv_host_rewrites_total").value_or(-1), 2);
    EXPECT_TRUE(no_violations(pd));
    EXPECT_TRUE(kv_freed(pd, Ms{2000}));
}

TEST_F(PullFlowTest, RewriteKvHostNeverPassesPsHostAsItIs) {
    auto& pd = start(PdOptions{}
                         .p(1)
                         .d(1)
                         .prefill_sim({"--kv-host", "localhost"})
                         .router({"--rewrite-kv-host", "never"}));
    json body = completion_body("keep my kv host", 4, false);
    auto r = send_generation(*pd.router, body, {{"X-Request-Id", "kv-host-never"}});
    EXPECT_TRUE(answer_ok(r, body)) << r.describe();
    const json handle = decode_handle(*pd.decode[0], "kv-host-never");
    EXPECT_EQ(handle.value("remote_host", ""), "localhost") << handle.dump();
    EXPECT_EQ(metric(metrics_text(*pd.router), "pdrouter_kv_host_rewrites_total").value_or(-1), 0);
    EXPECT_TRUE(kv_freed(pd, Ms{2000}));
}

TEST_F(PullFlowTest, APushModePrefillIsAModeMismatchNamingIt) {
    auto& pd = start(PdOptions{}.p(1).d(1));
    sim_fault(*pd.prefill[0], {{"kv_answer_push", true}});
    json body = chat_body("a push producer behind a pull router", 4, false);
    auto r = send_generation(*pd.router, body);
    EXPECT_EQ(r.status, 502) << r.describe();
    EXPECT_EQ(r.json()["error"]["code"], "kv_mode_mismatch") << r.body;
    EXPECT_NE(r.body.find(pd.prefill[0]->address()), std::string::npos) << r.body;
    EXPECT_NE(r.body.find("--kv-mode pull"), std::string::npos) << r.body;
    EXPECT_EQ(counter(sim_state(*pd.decode[0]), "requests"), 0);
    auto m = metrics_text(*pd.router);
    EXPECT_EQ(metric(m, "pdrouter_kv_mode_mismatch_total").value_or(0), 1) << m;
    EXPECT_EQ(metric(m, "pdrouter_retries_total", {{"leg", "prefill"}}).value_or(0), 0) << m;
    // A configuration error, not a broken instance: P stays up and serves the next request.
    json again = chat_body("the next one", 4, true);
    auto ok = send_generation(*pd.router, again);
    EXPECT_TRUE(answer_ok(ok, again)) << ok.describe();
}

TEST_F(PullFlowTest, DecodeKvParamsDoNotReachTheClient) {
    auto& pd = start(PdOptions{}.p(1).d(1).decode_sim({"--answer-kv-params", "on"}));
    for (bool stream : {false, true}) {
        json body = chat_body("hide the decode's handle", 5, stream);
        auto r = send_generation(*pd.router, body);
        EXPECT_TRUE(answer_ok(r, body)) << r.describe();
        EXPECT_EQ(r.body.find("kv_transfer_params"), std::string::npos) << r.body;
        EXPECT_EQ(r.body.find("remote_block_ids"), std::string::npos) << r.body;
    }
    EXPECT_EQ(
        metric(metrics_text(*pd.router), "pdrouter_decode_kv_params_removed_total").value_or(-1),
        2);
    EXPECT_TRUE(kv_freed(pd, Ms{2000}));
}

TEST_F(PullFlowTest, ExposeDecodeKvParamsPassesThemOn) {
    auto& pd = start(PdOptions{}
                         .p(1)
                         .d(1)
                         .decode_sim({"--answer-kv-params", "on"})
                         .router({"--expose-decode-kv-params"}));
    json whole = chat_body("show the decode's handle", 5, false);
    auto r = send_generation(*pd.router, whole);
    EXPECT_TRUE(answer_ok(r, whole)) << r.describe();
    EXPECT_EQ(r.json()["kv_transfer_params"].value("remote_engine_id", ""),
              sim_state(*pd.decode[0]).value("engine_id", "?"))
        << r.body;
    json streamed = chat_body("show the decode's handle", 5, true);
    auto s = send_generation(*pd.router, streamed);
    EXPECT_TRUE(answer_ok(s, streamed)) << s.describe();
    EXPECT_NE(s.body.find("\"kv_transfer_params\""), std::string::npos) << s.body;
    EXPECT_EQ(
        metric(metrics_text(*pd.router), "pdrouter_decode_kv_params_removed_total").value_or(-1),
        0);
}

TEST_F(PullFlowTest, MoreThanOneChoiceIsRefusedNamingN) {
    auto& pd = start(PdOptions{}.p(1).d(1));
    json body = chat_body("two choices please", 4, false);
    body["n"] = 2;
    auto r = send_generation(*pd.router, body);
    EXPECT_EQ(r.status, 400) << r.describe();
    EXPECT_EQ(r.json()["error"]["param"], "n") << r.body;
    EXPECT_NE(r.json()["error"]["message"].get<std::string>().find("n must be 1"),
              std::string::npos)
        << r.body;
    EXPECT_EQ(counter(sim_state(*pd.prefill[0]), "requests"), 0);
    EXPECT_EQ(counter(sim_state(*pd.decode[0]), "requests"), 0);
}

TEST_F(PullFlowTest, ServingRoutesArePassedThroughToOneInstance) {
    auto& pd = start(PdOptions{}.p(1).d(1).router({"--upstream-api-key", "engine-key"}));
    const std::vector<std::pair<std::string, json>> posts{
        {"/tokenize", {{"model", "m"}, {"prompt", "one two three"}}},
        {"/detokenize", {{"model", "m"}, {"tokens", {1, 2}}}},
        {"/v1/embeddings", {{"model", "m"}, {"input", {"a b", "c"}}}},
        {"/pooling", {{"model", "m"}, {"input", "a b"}}},
        {"/classify", {{"model", "m"}, {"input", "a b"}}},
        {"/score", {{"model", "m"}, {"text_1", "q"}, {"text_2", {"a", "b"}}}},
        {"/v1/score", {{"model", "m"}, {"text_1", "q"}, {"text_2", "a"}}},
        {"/rerank", {{"model", "m"}, {"query", "q"}, {"documents", {"a", "b", "c"}}}},
        {"/v1/rerank", {{"model", "m"}, {"query", "q"}, {"documents", {"a"}}}},
        {"/v2/rerank", {{"model", "m"}, {"query", "q"}, {"documents", {"a"}}}},
    };
    for (const auto& [path, body] : posts) {
        auto r = http_post_json(pd.router->port, path, body, {{"X-Request-Id", "pt" + path}});
        EXPECT_EQ(r.status, 200) << path << " " << r.describe();
    }
    auto emb = http_post_json(pd.router->port, "/v1/embeddings",
                              {{"model", "m"}, {"input", {"a b", "c"}}});
    ASSERT_EQ(emb.status, 200) << emb.describe();
    EXPECT_EQ(emb.json()["data"].size(), 2u) << emb.body;
    EXPECT_EQ(emb.json()["data"][1]["embedding"].size(), 8u) << emb.body;
    auto tok = http_post_json(pd.router->port, "/tokenize", {{"model", "m"}, {"prompt", "a b c"}});
    EXPECT_EQ(tok.json()["count"], 3) << tok.body;
    auto version = http_get(pd.router->port, "/version");
    EXPECT_EQ(version.status, 200) << version.describe();
    EXPECT_EQ(version.json()["version"], "0.0.0+pdsim") << version.body;
    // All on the decode (the default --pass-through-role), none disaggregated, with the
    // engines' key and the client's request id.
    const json d = sim_state(*pd.decode[0]);
    EXPECT_EQ(counter(d, "serving_requests"), static_cast<std::int64_t>(posts.size()) + 3);
    EXPECT_EQ(counter(d, "requests"), 0);
    EXPECT_EQ(counter(sim_state(*pd.prefill[0]), "serving_requests"), 0);
    auto seen = requests_with_id(*pd.decode[0], "pt/v1/rerank");
    ASSERT_EQ(seen.size(), 1u);
    EXPECT_EQ(seen[0]["path"], "/v1/rerank");
    EXPECT_EQ(seen[0]["headers"].value("authorization", ""), "Bearer engine-key") << seen[0].dump();
    auto m = metrics_text(*pd.router);
    EXPECT_EQ(
        metric(m, "pdrouter_requests_total", {{"route", "pass_through"}, {"status_class", "2xx"}}),
        static_cast<double>(posts.size()) + 3)
        << m;
    // Bad input is the router's own answer; an unknown route names itself.
    auto form = http_post(pd.router->port, "/v1/embeddings", "input=a", {}, Ms{10000},
                          "application/x-www-form-urlencoded");
    EXPECT_EQ(form.status, 415) << form.describe();
    auto bad = http_post_json(pd.router->port, "/v1/embeddings", {{"model", "m"}});
    EXPECT_EQ(bad.status, 400) << bad.describe();  // the engine's 400, relayed
    EXPECT_NE(bad.body.find("input"), std::string::npos) << bad.body;
    auto unknown = http_post_json(pd.router->port, "/v1/audio/speech", {{"model", "m"}});
    EXPECT_EQ(unknown.status, 404) << unknown.describe();
    EXPECT_NE(unknown.body.find("no route for /v1/audio/speech"), std::string::npos)
        << unknown.body;
    auto wrong = http_get(pd.router->port, "/v1/embeddings");
    EXPECT_EQ(wrong.status, 405) << wrong.describe();
}

TEST_F(PullFlowTest, PassThroughRolePrefillSendsThemToAPrefill) {
    auto& pd = start(PdOptions{}.p(1).d(1).router({"--pass-through-role", "prefill"}));
    auto r = http_post_json(pd.router->port, "/v1/embeddings", {{"model", "m"}, {"input", "x"}});
    EXPECT_EQ(r.status, 200) << r.describe();
    EXPECT_EQ(counter(sim_state(*pd.prefill[0]), "serving_requests"), 1);
    EXPECT_EQ(counter(sim_state(*pd.decode[0]), "serving_requests"), 0);
}

TEST_F(PullFlowTest, RouterForwardsLeaseRefreshToThePrefillThatHoldsTheId) {
    // The route is an admin route (its answer tells which ids are in flight).
    const Headers admin{{"X-API-Key", "lease-admin-key"}};
    auto& pd = start(PdOptions{}.p(2).d(1).router(
        {"--kv-lease-timeout-ms", "60000", "--admin-api-key", "lease-admin-key"}));
    sim_fault(*pd.decode[0], {{"delay_ms", 2000}, {"count", 1}});
    json body = completion_body("forward my refresh", 4, false);
    HttpResponse r;
    std::thread client([&] {
        r = send_generation(*pd.router, body, {{"X-Request-Id", "fwd-1"}}, Ms{10000});
    });
    // Wait until the decode leg is pending (P answered, D received the request).
    bool pending =
        wait_until([&] { return counter(sim_state(*pd.decode[0]), "requests") == 1; }, Ms{3000});
    Server* holder = nullptr;
    for (auto* p : pd.prefill) {
        if (!requests_with_id(*p, "fwd-1").empty()) {
            holder = p;
        }
    }
    if (pending && holder != nullptr) {
        Server* other = holder == pd.prefill[0] ? pd.prefill[1] : pd.prefill[0];
        auto before_holder = counter(sim_state(*holder), "lease_refresh_calls");
        auto before_other = counter(sim_state(*other), "lease_refresh_calls");
        auto m0 = metrics_text(*pd.router);
        auto fr =
            http_post_json(pd.router->port, "/internal/nixl/lease_refresh",
                           {{"request_ids", {"fwd-1", "no-such-id-1", "no-such-id-2"}}}, admin);
        EXPECT_EQ(fr.status, 200) << fr.describe();
        std::cout << "router lease_refresh answer: " << fr.body << "\n";
        EXPECT_TRUE(wait_until(
            [&] { return counter(sim_state(*holder), "lease_refresh_calls") > before_holder; },
            Ms{1000}))
            << "the refresh was not forwarded to " << holder->name;
        EXPECT_EQ(counter(sim_state(*other), "lease_refresh_calls"), before_other)
            << "refresh went to the wrong prefill";
        auto m1 = metrics_text(*pd.router);
        EXPECT_GE(metric(m1, "pdrouter_lease_refresh_unknown_total").value_or(0) -
                      metric(m0, "pdrouter_lease_refresh_unknown_total").value_or(0),
                  2.0)
            << m1;
        EXPECT_GE(metric(m1, "pdrouter_lease_refresh_forwarded_total").value_or(0) -
                      metric(m0, "pdrouter_lease_refresh_forwarded_total").value_or(0),
                  1.0)
            << m1;
    } else {
        ADD_FAILURE() << "decode leg never became pending (decode requests="
                      << counter(sim_state(*pd.decode[0]), "requests") << ")";
    }
    client.join();
    EXPECT_TRUE(answer_ok(r, body));
    // Malformed refresh bodies are rejected, not crashes.
    auto bad =
        http_post(pd.router->port, "/internal/nixl/lease_refresh", "{\"request_ids\": 5}", admin);
    EXPECT_EQ(bad.status, 400) << bad.describe();
    EXPECT_TRUE(no_violations(pd));
    EXPECT_TRUE(kv_freed(pd, Ms{2000}));
}

TEST_F(PullFlowTest, KeepAliveConnectionServesSeveralRequests) {
    auto& pd = start(PdOptions{});
    Connection c;
    std::string error;
    ASSERT_TRUE(c.connect(pd.router->port, error)) << error;
    for (int i = 0; i < 4; ++i) {
        json body = i % 2 ? chat_body("keep alive " + std::to_string(i), 3, i >= 2)
                          : completion_body("keep alive " + std::to_string(i), 3, i >= 2);
        auto r =
            http_exchange(c, {"POST",
                              route_of(body),
                              {{"Content-Type", "application/json"}, {"Connection", "keep-alive"}},
                              body.dump()});
        EXPECT_TRUE(answer_ok(r, body)) << "request " << i << " on the same connection";
        ASSERT_TRUE(c.is_open()) << "the router closed a keep-alive connection after request " << i;
    }
    EXPECT_EQ(counter(sim_state(*pd.decode[0]), "requests"), 4);
    EXPECT_TRUE(kv_freed(pd, Ms{2000}));
}

TEST_F(PullFlowTest, Ipv6LoopbackInstances) {
    Cluster& c = new_cluster();
    Server& p = c.start("pdsim-prefill-v6", pdsim_path(),
                        {"--role", "prefill", "--host", "::1", "--port", "0", "--model", kModel});
    Server& d = c.start("pdsim-decode-v6", pdsim_path(),
                        {"--role", "decode", "--host", "::1", "--port", "0", "--model", kModel});
    const std::string pa = "[::1]:" + std::to_string(p.port);
    const std::string da = "[::1]:" + std::to_string(d.port);
    Server& router = c.start_router({pa}, {da});
    // The test's debug helpers speak IPv4; reach the pdsims through the router only and check
    // the answer, then the router's view of its instances.
    for (bool stream : {false, true}) {
        json body = completion_body("over ipv6", 5, stream);
        EXPECT_TRUE(answer_ok(send_generation(router, body), body));
    }
    auto st = http_get(router.port, "/status").json();
    EXPECT_NE(st.dump().find(pa), std::string::npos) << st.dump();
    EXPECT_NE(st.dump().find(da), std::string::npos) << st.dump();
}

}  // namespace
}  // namespace pdr::test
