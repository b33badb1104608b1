// The LMCache flow (PROTOCOLS.md §5, --kv-mode lmcache) through real pdrouter + pdsim processes:
// pdsim prefills send the KV to pdsim decodes' receivers and notify the router's ZMQ PULL socket
// once per TP rank; the router waits for every rank, then decodes on token ids. Exact text (P's
// first token plus D's continuation equals the single-engine answer), chat conversion, usage,
// TP 2, xPyD, and each notification fault with both timeout policies.
#include <gtest/gtest.h>

#include <unistd.h>
#include <zmq.hpp>

#include <fstream>
#include <set>
#include <thread>

#include "net/common/loopback_port.hpp"
#include "tests/support/checks.hpp"
#include "tests/support/fixture.hpp"

namespace pdr::test {
namespace {

using nlohmann::json;

struct LmOptions {
    int prefills = 1;
    int decodes = 1;
    int tp = 1;
    std::vector<std::string> router_args;
};

struct LmCluster {
    Cluster* cluster = nullptr;
    std::vector<Server*> prefill, decode;
    Server* router = nullptr;
    std::string kv_ready;  // tcp://127.0.0.1:PORT
};

// The router flags every LMCache test gives: the decodes' receiver ports and short bounds.
std::vector<std::string> lmcache_router_args(const std::vector<Server*>& decodes) {
    auto join = [](const std::vector<unsigned short>& v) {
        std::string s;
        for (auto p : v) {
            s += (s.empty() ? "" : ",") + std::to_string(p);
        }
        return s;
    };
    std::string init, alloc;
    for (const Server* d : decodes) {
        init += (init.empty() ? "" : " ") + join(d->lmcache_init_ports);
        alloc += (alloc.empty() ? "" : " ") + join(d->lmcache_alloc_ports);
    }
    return {"--kv-mode",
            "lmcache",
            "--lmcache-init-ports",
            init,
            "--lmcache-alloc-ports",
            alloc,
            "--kv-ready-timeout-ms",
            "3000",
            "--connect-timeout-ms",
            "500",
            "--health-interval-ms",
            "60000"};
}

class LmcacheFlowTest : public ClusterTest {
protected:
    LmCluster start_lm(const LmOptions& o) {
        LmCluster lm;
        lm.cluster = &new_cluster();
        lm.kv_ready = "tcp://127.0.0.1:" + std::to_string(pick_loopback_port());
        const std::string tp = std::to_string(o.tp);
        std::vector<std::string> ps, ds;
        for (int i = 0; i < o.prefills; ++i) {
            lm.prefill.push_back(&lm.cluster->start_pdsim(
                "prefill",
                {"--kv-mode", "lmcache", "--tp-size", tp, "--kv-ready-connect", lm.kv_ready}));
            ps.push_back(lm.prefill.back()->address());
        }
        for (int i = 0; i < o.decodes; ++i) {
            lm.decode.push_back(
                &lm.cluster->start_pdsim("decode", {"--kv-mode", "lmcache", "--tp-size", tp}));
            ds.push_back(lm.decode.back()->address());
        }
        std::vector<std::string> args = lmcache_router_args(lm.decode);
        args.insert(args.end(), {"--kv-ready-bind", lm.kv_ready});
        args.insert(args.end(), o.router_args.begin(), o.router_args.end());
        lm.router = &lm.cluster->start_router(ps, ds, args);
        return lm;
    }
};

double m(const Server& router, const std::string& name,
         const std::map<std::string, std::string>& labels = {}) {
    return metric(metrics_text(router), name, labels).value_or(-1);
}

bool metric_reaches(const Server& router, const std::string& name,
                    const std::map<std::string, std::string>& labels, double at_least,
                    Ms bound = Ms{3000}) {
    return wait_until([&] { return m(router, name, labels) >= at_least; }, bound);
}

// The decode-leg requests a pdsim recorded (POSTs whose prompt is a token-id list).
int decode_legs(const Server& d) {
    int n = 0;
    for (const auto& r : sim_requests(d)) {
        n += r.value("path", "") == "/v1/completions" ? 1 : 0;
    }
    return n;
}

std::string first_token_text(const json& body) {
    return token_id_text(expected_first_token(prompt_token_ids(body)));
}

TEST_F(LmcacheFlowTest, OneToOneEveryShapeExactTextFirstTokenFirstAndUsage) {
    LmCluster lm = start_lm({});
    int n = 0;
    for (bool chat : {false, true}) {
        for (bool stream : {false, true}) {
            ++n;
            json body = chat ? chat_body("tell me about rivers " + std::to_string(n), 7, stream)
                             : completion_body("once upon a time " + std::to_string(n), 7, stream);
            if (stream) {
                body["stream_options"] = {{"include_usage", true}};
            }
            const HttpResponse r = send_generation(*lm.router, body);
            EXPECT_TRUE(answer_ok(r, body)) << r.describe();
            const std::string first = first_token_text(body);
            const std::size_t prompt_tokens = prompt_token_ids(body).size();
            json usage;
            if (!stream) {
                const json j = r.json();
                EXPECT_EQ(j.value("object", ""), chat ? "chat.completion" : "text_completion");
                const std::string text =
                    chat ? j["choices"][0]["message"]["content"].get<std::string>()
                         : j["choices"][0]["text"].get<std::string>();
                EXPECT_EQ(text.substr(0, first.size()), first);
                usage = j["usage"];
            } else {
                const std::vector<std::string> events = sse_data(r.body);
                ASSERT_GE(events.size(), 4u) << r.body;
                // Chat: a role chunk, then P's token; completions: P's token first.
                const json e0 = json::parse(events[0]);
                const json content = json::parse(events[chat ? 1 : 0]);
                if (chat) {
                    EXPECT_EQ(e0["choices"][0]["delta"]["role"], "assistant");
                    EXPECT_EQ(content["choices"][0]["delta"]["content"], first);
                } else {
                    EXPECT_EQ(content["choices"][0]["text"], first);
                }
                std::set<std::string> ids;
                std::set<long long> created;
                for (const auto& e : events) {
                    if (e == "[DONE]") {
                        continue;
                    }
                    const json j = json::parse(e);
                    ids.insert(j["id"].get<std::string>());
                    created.insert(j["created"].get<long long>());
                    EXPECT_EQ(j["object"], chat ? "chat.completion.chunk" : "text_completion");
                    if (j.contains("usage") && j["usage"].is_object()) {
                        usage = j["usage"];
                    }
                }
                EXPECT_EQ(ids.size(), 1u) << r.body;
                EXPECT_EQ(created.size(), 1u) << r.body;
            }
            EXPECT_EQ(usage["prompt_tokens"], prompt_tokens) << usage;
            EXPECT_EQ(usage["completion_tokens"], 7) << usage;
            EXPECT_EQ(usage["total_tokens"], prompt_tokens + 7) << usage;
        }
    }
    EXPECT_EQ(m(*lm.router, "pdrouter_kv_ready_timeouts_total"), 0);
    EXPECT_GE(m(*lm.router, "pdrouter_kv_ready_wait_seconds_count"), 4);
    EXPECT_EQ(counter(sim_state(*lm.decode[0]), "lmcache_kv_missing"), 0);
    EXPECT_EQ(counter(sim_state(*lm.decode[0]), "lmcache_kv_claimed"), 4);
}

TEST_F(LmcacheFlowTest, ImageOrAudioContentIsRefusedNamingTheMode) {
    LmCluster lm = start_lm({});
    json body = chat_body("what is in this picture", 5, false);
    body["messages"][0]["content"] = json::array(
        {{{"type", "text"}, {"text", "what is in this picture"}},
         {{"type", "image_url"}, {"image_url", {{"url", "data:image/png;base64,AAAA"}}}}});
    const HttpResponse r = send_generation(*lm.router, body);
    EXPECT_EQ(r.status, 400) << r.describe();
    EXPECT_EQ(r.json()["error"]["param"], "messages") << r.body;
    EXPECT_NE(r.body.find("lmcache KV mode serves text only"), std::string::npos) << r.body;
    EXPECT_NE(r.body.find("image_url"), std::string::npos) << r.body;
    // Nothing reached an engine (not even /tokenize).
    EXPECT_EQ(counter(sim_state(*lm.prefill[0]), "serving_requests"), 0);
    EXPECT_EQ(counter(sim_state(*lm.prefill[0]), "requests"), 0);
    EXPECT_EQ(decode_legs(*lm.decode[0]), 0);
}

TEST_F(LmcacheFlowTest, TwoByTwoWithTp2UsesEveryInstance) {
    LmCluster lm = start_lm({.prefills = 2, .decodes = 2, .tp = 2, .router_args = {}});
    for (int i = 0; i < 8; ++i) {
        json body = completion_body("xpyd prompt number " + std::to_string(i), 5, i % 2 == 1);
        EXPECT_TRUE(answer_ok(send_generation(*lm.router, body), body)) << i;
    }
    for (Server* d : lm.decode) {
        EXPECT_EQ(counter(sim_state(*d), "lmcache_kv_claimed"), 4);
    }
    for (Server* p : lm.prefill) {
        EXPECT_EQ(counter(sim_state(*p), "lmcache_handovers"), 4);
        EXPECT_EQ(counter(sim_state(*p), "lmcache_notifs_sent"), 8);  // 2 ranks each
    }
    EXPECT_TRUE(metric_reaches(*lm.router, "pdrouter_kv_ready_notifications_total", {}, 16));
}

TEST_F(LmcacheFlowTest, Tp2WaitsForTheSecondRanksNotification) {
    LmCluster lm = start_lm({.tp = 2, .router_args = {"--kv-ready-timeout-ms", "800"}});
    // Rank 1's notification never comes: the request must not start D on rank 0's alone.
    sim_fault(*lm.prefill[0], {{"lmcache_drop_notif_ranks", {1}}, {"count", 1}});
    const auto t0 = Clock::now();
    const HttpResponse r = send_generation(*lm.router, completion_body("half notified", 4, false));
    EXPECT_EQ(r.status, 504) << r.describe();
    std::string message;
    EXPECT_TRUE(is_openai_error(r.body, &message));
    EXPECT_NE(message.find("1 of 2 arrived"), std::string::npos) << message;
    EXPECT_GE(ms_between(t0, Clock::now()), 700.0);
    EXPECT_EQ(decode_legs(*lm.decode[0]), 0);
    EXPECT_EQ(m(*lm.router, "pdrouter_kv_ready_timeouts_total", {{"policy", "error"}}), 1);
    // A late second rank (notified 300 ms after P's answer) is waited for, and D starts after.
    sim_fault(*lm.prefill[0], {{"lmcache_notif_delay_ms", 300}, {"count", 1}});
    json body = completion_body("late but complete", 4, true);
    EXPECT_TRUE(answer_ok(send_generation(*lm.router, body), body));
}

TEST_F(LmcacheFlowTest, LostNotificationUnderProceedPolicySendsTheDecodeLegAnyway) {
    LmCluster lm = start_lm(
        {.router_args = {"--kv-ready-timeout-ms", "300", "--on-kv-ready-timeout", "proceed"}});
    sim_fault(*lm.prefill[0], {{"lmcache_drop_notif_ranks", {0}}, {"count", 1}});
    json body = chat_body("proceed without the notification", 5, false);
    EXPECT_TRUE(answer_ok(send_generation(*lm.router, body), body));
    EXPECT_EQ(m(*lm.router, "pdrouter_kv_ready_timeouts_total", {{"policy", "proceed"}}), 1);
}

// The test's own PUSH socket to the router's PULL address: a notification the test sends.
class Notifier {
public:
    explicit Notifier(const std::string& endpoint) {
        push_.set(zmq::sockopt::linger, 1000);
        push_.connect(endpoint);
    }
    void notify(const std::string& req_id) {
        const std::vector<std::uint8_t> bytes =
            json::to_msgpack(json{{"type", "ProxyNotif"}, {"req_id", req_id}});
        push_.send(zmq::buffer(bytes), zmq::send_flags::none);
    }

private:
    zmq::context_t ctx_{1};
    zmq::socket_t push_{ctx_, zmq::socket_type::push};
};

// The req_id is random (kv_ready_owner.hpp): a notification forged with the client's own
// X-Request-Id, which it once was, names no request. Before the fix the forged one made the
// router start D with no KV on it (D: 500 "KV not received"); now the request times out
// cleanly and D is never called.
TEST_F(LmcacheFlowTest, ANotificationForgedWithTheClientsIdChangesNothing) {
    LmCluster lm = start_lm(
        {.prefills = 1, .decodes = 1, .tp = 1, .router_args = {"--kv-ready-timeout-ms", "1000"}});
    Notifier notifier(lm.kv_ready);
    // Sent before the request exists (kept as an unknown id) and again while P works on it.
    notifier.notify("spoof-victim-1");
    ASSERT_TRUE(metric_reaches(*lm.router, "pdrouter_kv_ready_notifications_total",
                               {{"outcome", "unknown"}}, 1));
    sim_fault(*lm.prefill[0], {{"lmcache_drop_notif_ranks", {0}}, {"delay_ms", 300}, {"count", 1}});
    json a = completion_body("forged ready", 4, false);
    HttpResponse r;
    std::thread client([&] {
        r = send_generation(*lm.router, a, {{"X-Request-Id", "spoof-victim-1"}});
    });
    const bool p_busy =
        wait_until([&] { return counter(sim_state(*lm.prefill[0]), "in_flight") == 1; }, Ms{3000});
    notifier.notify("spoof-victim-1");
    client.join();
    ASSERT_TRUE(p_busy);
    EXPECT_EQ(r.status, 504) << r.describe();
    EXPECT_EQ(r.header("x-request-id"), "spoof-victim-1");  // the client's id is still its own
    EXPECT_EQ(decode_legs(*lm.decode[0]), 0);
    EXPECT_TRUE(metric_reaches(*lm.router, "pdrouter_kv_ready_notifications_total",
                               {{"outcome", "unknown"}}, 2));
    EXPECT_EQ(m(*lm.router, "pdrouter_kv_ready_notifications_total", {{"outcome", "early"}}), 0);
    EXPECT_EQ(m(*lm.router, "pdrouter_kv_ready_notifications_total", {{"outcome", "matched"}}), 0);
    EXPECT_EQ(m(*lm.router, "pdrouter_kv_ready_timeouts_total", {{"policy", "error"}}), 1);
}

TEST_F(LmcacheFlowTest, EarlyDuplicateAndGarbageNotificationsChangeNothing) {
    LmCluster lm = start_lm({});
    sim_fault(*lm.prefill[0], {{"lmcache_notif_early", true}, {"count", 1}});
    json a = completion_body("early bird", 4, false);
    EXPECT_TRUE(answer_ok(send_generation(*lm.router, a), a));

    sim_fault(*lm.prefill[0], {{"lmcache_notif_duplicate", true}, {"count", 1}});
    json b = completion_body("said twice", 4, true);
    EXPECT_TRUE(answer_ok(send_generation(*lm.router, b), b));
    EXPECT_TRUE(metric_reaches(*lm.router, "pdrouter_kv_ready_notifications_total",
                               {{"outcome", "duplicate"}}, 1));

    sim_fault(*lm.prefill[0], {{"lmcache_notif_garbage", true}, {"count", 1}});
    json c = chat_body("noise first", 4, false);
    EXPECT_TRUE(answer_ok(send_generation(*lm.router, c), c));
    for (const char* reason : {"not_msgpack", "not_map", "no_req_id", "multipart"}) {
        EXPECT_TRUE(metric_reaches(*lm.router, "pdrouter_kv_ready_malformed_total",
                                   {{"reason", reason}}, 1))
            << reason;
    }
    json d = completion_body("still serving", 3, false);
    EXPECT_TRUE(answer_ok(send_generation(*lm.router, d), d));
}

TEST_F(LmcacheFlowTest, OrphansAreEvictedByTtlAndTheTableIsBounded) {
    LmCluster lm =
        start_lm({.router_args = {"--kv-ready-ttl-ms", "400", "--kv-ready-max-pending", "5"}});
    zmq::context_t ctx(1);
    zmq::socket_t push(ctx, zmq::socket_type::push);
    push.set(zmq::sockopt::linger, 1000);
    push.connect(lm.kv_ready);
    for (int i = 0; i < 20; ++i) {
        const json n = {{"type", "ProxyNotif"}, {"req_id", "never-issued-" + std::to_string(i)}};
        const std::vector<std::uint8_t> bytes = json::to_msgpack(n);
        push.send(zmq::buffer(bytes), zmq::send_flags::none);
    }
    EXPECT_TRUE(metric_reaches(*lm.router, "pdrouter_kv_ready_notifications_total",
                               {{"outcome", "unknown"}}, 20));
    EXPECT_LE(m(*lm.router, "pdrouter_kv_ready_pending"), 5);
    EXPECT_GE(m(*lm.router, "pdrouter_kv_ready_evictions_total", {{"reason", "capacity"}}), 15);
    EXPECT_TRUE(
        wait_until([&] { return m(*lm.router, "pdrouter_kv_ready_pending") == 0; }, Ms{3000}));
    EXPECT_GE(m(*lm.router, "pdrouter_kv_ready_evictions_total", {{"reason", "ttl"}}), 1);
    json body = completion_body("after the flood", 3, false);
    EXPECT_TRUE(answer_ok(send_generation(*lm.router, body), body));
}

TEST_F(LmcacheFlowTest, ClientGoneWhileWaitingRemovesTheWaiterAndDIsNotCalled) {
    LmCluster lm = start_lm({});
    sim_fault(*lm.prefill[0], {{"lmcache_notif_delay_ms", 1500}, {"count", 1}});
    Connection c;
    std::string error;
    ASSERT_TRUE(c.connect(lm.router->port, error)) << error;
    HttpRequest req{"POST",
                    "/v1/completions",
                    {{"Content-Type", "application/json"}},
                    completion_body("leaving early", 5, true).dump()};
    ASSERT_TRUE(c.write_all(serialize(req), error)) << error;
    // P answered (its leg is done; it notifies 1.5 s later) and the router waits for the
    // notification: leave then.
    ASSERT_TRUE(wait_until(
        [&] {
            const json st = sim_state(*lm.prefill[0]);
            return counter(st, "lmcache_handovers") == 1 && counter(st, "in_flight") == 0;
        },
        Ms{3000}));
    c.close(true);
    // Counted as a disconnect in the handover phase (or, when P's answer was still on its way
    // to the router, the prefill phase): either way the registration is released.
    EXPECT_TRUE(metric_reaches(*lm.router, "pdrouter_client_disconnects_total", {}, 1));
    // The late notification finds no waiter; D was never called.
    EXPECT_TRUE(metric_reaches(*lm.router, "pdrouter_kv_ready_notifications_total",
                               {{"outcome", "duplicate"}}, 1, Ms{4000}));
    EXPECT_EQ(decode_legs(*lm.decode[0]), 0);
}

TEST_F(LmcacheFlowTest, PrefillFailingBeforeOrAfterNotifyingIsAnErrorAndDIsNotCalled) {
    LmCluster lm = start_lm({.router_args = {"--prefill-retries", "0"}});
    sim_fault(*lm.prefill[0], {{"status", 500}, {"count", 1}});
    HttpResponse before = send_generation(*lm.router, completion_body("p fails first", 4, false));
    EXPECT_EQ(before.status, 502) << before.describe();
    sim_fault(*lm.prefill[0], {{"lmcache_fail_after_notif", true}, {"count", 1}});
    HttpResponse after = send_generation(*lm.router, chat_body("p fails after", 4, true));
    EXPECT_EQ(after.status, 502) << after.describe();
    EXPECT_TRUE(is_openai_error(after.body));
    EXPECT_EQ(decode_legs(*lm.decode[0]), 0);
}

TEST_F(LmcacheFlowTest, DecodeFailureIsRelayed) {
    LmCluster lm = start_lm({});
    sim_fault(*lm.decode[0], {{"status", 503}, {"count", 1}});
    const HttpResponse r = send_generation(*lm.router, completion_body("d says no", 4, false));
    EXPECT_EQ(r.status, 503) << r.describe();
    EXPECT_TRUE(is_openai_error(r.body));
    // D without the KV (P skipped its rank) refuses, and that refusal reaches the client too.
    sim_fault(*lm.prefill[0], {{"lmcache_skip_kv_ranks", {0}}, {"count", 1}});
    const HttpResponse missing = send_generation(*lm.router, completion_body("no kv", 4, false));
    EXPECT_GE(missing.status, 500) << missing.describe();
    EXPECT_EQ(counter(sim_state(*lm.decode[0]), "lmcache_kv_missing"), 1);
}

TEST_F(LmcacheFlowTest, MaxTokensOneIsAnsweredFromPrefillAlone) {
    LmCluster lm = start_lm({});
    for (bool stream : {false, true}) {
        json body = chat_body("one token only", 1, stream);
        EXPECT_TRUE(answer_ok(send_generation(*lm.router, body), body));
    }
    EXPECT_EQ(decode_legs(*lm.decode[0]), 0);
    // P got no disagg_spec: no KV moved, no notification sent.
    EXPECT_EQ(counter(sim_state(*lm.prefill[0]), "lmcache_notifs_sent"), 0);
    EXPECT_EQ(counter(sim_state(*lm.decode[0]), "lmcache_kv_received"), 0);
}

TEST_F(LmcacheFlowTest, AdminAddTakesTheReceiverPortsAndTheNewDecodeServes) {
    const Headers auth{{"X-API-Key", "lm-admin-key"}};
    LmCluster lm = start_lm(
        {.prefills = 1, .decodes = 1, .tp = 1, .router_args = {"--admin-api-key", "lm-admin-key"}});
    Server& d2 = lm.cluster->start_pdsim("decode", {"--kv-mode", "lmcache"});
    const json bad = {{"type", "decode"},
                      {"instance", d2.address()},
                      {"lmcache_init_ports", d2.lmcache_init_ports},
                      {"lmcache_alloc_ports", json::array({1, 2})}};
    const HttpResponse refused = http_post_json(lm.router->port, "/instances/add", bad, auth);
    EXPECT_EQ(refused.status, 400) << refused.describe();
    const json add = {{"type", "decode"},
                      {"instance", d2.address()},
                      {"lmcache_init_ports", d2.lmcache_init_ports},
                      {"lmcache_alloc_ports", d2.lmcache_alloc_ports},
                      {"lmcache_receiver_host", "127.0.0.1"}};
    const HttpResponse added = http_post_json(lm.router->port, "/instances/add", add, auth);
    ASSERT_EQ(added.status, 200) << added.describe();
    const json listed = http_get(lm.router->port, "/instances", auth).json();
    bool shown = false;
    for (const auto& inst : listed) {
        if (inst.value("name", "") == d2.address()) {
            shown = inst["lmcache_init_ports"] == json(d2.lmcache_init_ports) &&
                    inst["lmcache_alloc_ports"] == json(d2.lmcache_alloc_ports) &&
                    inst["lmcache_receiver_host"] == "127.0.0.1";
        }
    }
    EXPECT_TRUE(shown) << listed.dump();
    // With the configured decode removed, requests go to the added one.
    const json rm = {{"type", "decode"}, {"instance", lm.decode[0]->address()}};
    ASSERT_EQ(http_post_json(lm.router->port, "/instances/remove", rm, auth).status, 200);
    json body = chat_body("served by the added decode", 5, true);
    EXPECT_TRUE(answer_ok(send_generation(*lm.router, body), body));
    EXPECT_EQ(counter(sim_state(d2), "lmcache_kv_claimed"), 1);
}

TEST_F(LmcacheFlowTest, DecodeWithoutReceiverPortsIsNeverChosen) {
    Cluster& c = new_cluster();
    Server& p =
        c.start_pdsim("prefill", {"--kv-mode", "lmcache", "--kv-ready-connect",
                                  "tcp://127.0.0.1:" + std::to_string(pick_loopback_port())});
    Server& d = c.start_pdsim("decode", {"--kv-mode", "lmcache"});
    Server& router =
        c.start_router({p.address()}, {d.address()},
                       {"--kv-mode", "lmcache", "--kv-ready-bind", "tcp://127.0.0.1:0"});
    const HttpResponse r = send_generation(router, completion_body("nowhere to go", 3, false));
    EXPECT_EQ(r.status, 503) << r.describe();
    std::string message;
    EXPECT_TRUE(is_openai_error(r.body, &message));
    EXPECT_NE(message.find("receiver ports"), std::string::npos) << message;
    const json status = http_get(router.port, "/status").json();
    ASSERT_EQ(status["decode_nodes_unusable"].size(), 1u) << status;
    EXPECT_EQ(status["decode_nodes_unusable"][0]["name"], d.address());
    EXPECT_EQ(counter(sim_state(p), "requests"), 0);
}

// Two router replicas in front of the same pools (issue 18): P1 notifies replica A only and P2
// replica B only, while each replica sends its requests to both prefills in turn. So half of
// each replica's requests are notified to the other replica, and they complete only because it
// forwards them: A knows B from --peer-routers, B knows A through --peer-routers-dns (the
// headless Service's name, resolved from a hosts file that also lists B itself). Each replica's
// id is the host of its PULL socket: 127.0.0.1 and ::1, one port, as a Service's pods share it.
TEST_F(LmcacheFlowTest, TwoReplicasForwardNotificationsToTheReplicaThatIssuedTheRequest) {
    Cluster& c = new_cluster();
    const std::string port = std::to_string(pick_loopback_port());
    const std::string a_pull = "tcp://127.0.0.1:" + port;
    const std::string b_pull = "tcp://[::1]:" + port;
    Server& p1 = c.start_pdsim("prefill", {"--kv-mode", "lmcache", "--kv-ready-connect", a_pull});
    Server& p2 = c.start_pdsim("prefill", {"--kv-mode", "lmcache", "--kv-ready-connect", b_pull});
    Server& d = c.start_pdsim("decode", {"--kv-mode", "lmcache"});
    const std::string hosts = c.dir().file("hosts");
    std::ofstream(hosts) << "routers.pd.test 127.0.0.1 ::1\n";
    const std::vector<std::string> ps = {p1.address(), p2.address()}, ds = {d.address()};
    std::vector<std::string> a_args = lmcache_router_args({&d});
    a_args.insert(a_args.end(), {"--kv-ready-bind", a_pull, "--peer-routers", "[::1]:" + port});
    Server& a = c.start_router(ps, ds, a_args);
    std::vector<std::string> b_args = lmcache_router_args({&d});
    b_args.insert(b_args.end(),
                  {"--kv-ready-bind", b_pull, "--peer-routers-dns", "routers.pd.test:" + port,
                   "--dns-hosts-file", hosts, "--dns-refresh-ms", "100"});
    Server& b = c.start_router(ps, ds, b_args);
    ASSERT_TRUE(metric_reaches(b, "pdrouter_kv_ready_peers", {}, 1));
    EXPECT_EQ(m(b, "pdrouter_discovery_addresses", {{"role", "router"}}), 2);  // itself left out
    EXPECT_GE(m(b, "pdrouter_discovery_resolutions_total", {{"role", "router"}, {"result", "ok"}}),
              1);
    EXPECT_EQ(m(a, "pdrouter_kv_ready_peers"), 1);
    EXPECT_EQ(http_get(b.port, "/status").json().value("replica_id", ""), "::1");

    for (int i = 0; i < 4; ++i) {
        for (Server* r : {&a, &b}) {
            const std::string text =
                "replica " + std::to_string(r->port) + " #" + std::to_string(i);
            json body = i % 2 == 0 ? completion_body(text, 4, i == 2) : chat_body(text, 4, i == 3);
            EXPECT_TRUE(answer_ok(send_generation(*r, body), body)) << c.logs();
        }
    }
    for (Server* r : {&a, &b}) {
        for (auto [result, n] :
             {std::pair{"sent", 2}, std::pair{"received", 2}, std::pair{"unknown_owner", 0},
              std::pair{"not_owner", 0}, std::pair{"queue_full", 0}}) {
            EXPECT_EQ(m(*r, "pdrouter_kv_ready_forwarded_total", {{"result", result}}), n)
                << r->port << " " << result;
        }
        EXPECT_EQ(m(*r, "pdrouter_kv_ready_timeouts_total", {{"policy", "error"}}), 0);
    }
    EXPECT_EQ(counter(sim_state(d), "lmcache_kv_claimed"), 8);

    // What cannot be delivered is counted, never forwarded again: an owner nobody knows, and a
    // frame a peer forwarded that is not this replica's.
    zmq::context_t ctx(1);
    zmq::socket_t push(ctx, zmq::socket_type::push);
    push.set(zmq::sockopt::linger, 1000);
    push.connect(a_pull);
    const std::vector<std::uint8_t> stray =
        json::to_msgpack(json{{"type", "ProxyNotif"}, {"req_id", "r-1@10.9.9.9"}});
    push.send(zmq::buffer(stray), zmq::send_flags::none);
    const std::string mark = "pdrouter-kv-ready-forwarded/1";
    const std::vector<std::uint8_t> bs =
        json::to_msgpack(json{{"type", "ProxyNotif"}, {"req_id", "r-2@::1"}});
    push.send(zmq::buffer(mark), zmq::send_flags::sndmore);
    push.send(zmq::buffer(bs), zmq::send_flags::none);
    EXPECT_TRUE(
        metric_reaches(a, "pdrouter_kv_ready_forwarded_total", {{"result", "unknown_owner"}}, 1));
    EXPECT_TRUE(
        metric_reaches(a, "pdrouter_kv_ready_forwarded_total", {{"result", "not_owner"}}, 1));
    EXPECT_EQ(m(a, "pdrouter_kv_ready_forwarded_total", {{"result", "sent"}}), 2);
    EXPECT_EQ(m(b, "pdrouter_kv_ready_forwarded_total", {{"result", "received"}}), 2);
}

}  // namespace
}  // namespace pdr::test
