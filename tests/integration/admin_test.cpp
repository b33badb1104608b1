// Admin API (/instances/*), /status, /health and /v1/models against real processes, and
// --hide-instance-addresses.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <stdexcept>
#include <thread>

#include "tests/support/checks.hpp"
#include "tests/support/fixture.hpp"

namespace pdr::test {
namespace {

using nlohmann::json;

class AdminTest : public ClusterTest {};

constexpr const char* kKey = "sekret-admin-key";

HttpResponse admin_post(const Server& router, const std::string& action, const json& body,
                        const Headers& auth) {
    return http_post_json(router.port, "/instances/" + action, body, auth);
}

json find_instance(const Server& router, const std::string& name) {
    auto r = http_get(router.port, "/instances", {{"X-API-Key", kKey}});
    auto j = r.json();
    const json* list = &j;
    if (j.is_object() && j.contains("instances")) {
        list = &j["instances"];
    }
    if (list->is_array()) {
        for (const auto& i : *list) {
            if (i.value("name", "") == name) {
                return i;
            }
        }
    }
    return nullptr;
}

// A loopback port that was free a moment ago.
unsigned short free_port() {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
        throw std::runtime_error("free_port: bind failed");
    }
    socklen_t len = sizeof addr;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
    ::close(fd);
    return ntohs(addr.sin_port);
}

// The router's own listen address is no instance: refused at start (exit 2) and by
// /instances/add, however it is spelled (127.0.0.1, localhost, 0.0.0.0).
TEST_F(AdminTest, TheRouterItselfIsNoInstance) {
    const std::string port = std::to_string(free_port());
    RunResult r = run_to_exit(pdrouter_path(),
                              {"--host", "127.0.0.1", "--port", port, "--prefill", "127.0.0.1:9",
                               "--decode", "localhost:" + port},
                              Ms{10000});
    EXPECT_TRUE(r.status.exited && r.status.code == 2) << r.err;
    EXPECT_NE(r.err.find("own listen address"), std::string::npos) << r.err;

    auto& pd = start(PdOptions{}.router({"--admin-api-key", kKey}));
    const std::string own = std::to_string(pd.router->port);
    for (const std::string host : {"127.0.0.1", "localhost", "0.0.0.0"}) {
        auto add =
            admin_post(*pd.router, "add", {{"type", "decode"}, {"instance", host + ":" + own}},
                       {{"X-API-Key", kKey}});
        EXPECT_EQ(add.status, 400) << host << ": " << add.describe();
        EXPECT_NE(add.body.find("own listen address"), std::string::npos) << add.body;
    }
}

// Two routers that route to each other (A's decode is B, B's is A): the request that comes back
// to A carries A's id in X-Pdrouter-Hop and gets 508 loop_detected (not a confusing 409 for its
// request id), which reaches the client; the prefill's blocks are all freed. Adding such a router
// at run time fails its model probe the same way.
TEST_F(AdminTest, ALoopThroughAnotherRouterEndsIn508) {
    auto& pd =
        start(PdOptions{}.sim({"--kv-lease-seconds", "1"}).router({"--admin-api-key", kKey}));
    const std::string a_port = std::to_string(free_port());
    Cluster& other = new_cluster();
    const std::vector<std::string> lease{"--kv-lease-timeout-ms", "600"};
    Server& b = other.start_router({pd.prefill[0]->address()}, {"127.0.0.1:" + a_port}, lease);
    Server& a =
        other.start("router-a", pdrouter_path(),
                    {"--host", "127.0.0.1", "--port", a_port, "--prefill", pd.prefill[0]->address(),
                     "--decode", b.address(), "--kv-lease-timeout-ms", "600"});
    auto r = send_generation(a, completion_body("round and round", 3, false));
    EXPECT_EQ(r.status, 508) << r.describe();
    EXPECT_NE(r.body.find("loop_detected"), std::string::npos) << r.body;
    EXPECT_NE(r.body.find("already went through this router"), std::string::npos) << r.body;
    EXPECT_TRUE(kv_freed(pd, Ms{5000}));

    // A third router that adds A sees the loop behind it in A's answer to the model probe.
    auto add = admin_post(*pd.router, "add", {{"type", "decode"}, {"instance", a.address()}},
                          {{"X-API-Key", kKey}});
    EXPECT_EQ(add.status, 502) << add.describe();
    EXPECT_NE(add.body.find("loop detected"), std::string::npos) << add.body;
}

// --upstream-api-key goes to static instances and to admin-added ones in --instance-allow only.
TEST_F(AdminTest, UpstreamKeyOnlyForAllowedInstances) {
    for (const bool allowed : {false, true}) {
        std::vector<std::string> args{"--admin-api-key",      kKey,
                                      "--upstream-api-key",   "up-secret",
                                      "--health-interval-ms", "300"};
        if (allowed) {
            args.insert(args.end(), {"--instance-allow", "127.0.0.0/8"});
        }
        auto& pd = start(PdOptions{}.router(args));
        Cluster& extra = new_cluster();
        Server& d2 = extra.start_pdsim("decode");
        auto add = admin_post(*pd.router, "add", {{"type", "decode"}, {"instance", d2.address()}},
                              {{"X-API-Key", kKey}});
        ASSERT_EQ(add.status, 200) << add.describe();
        auto rm = admin_post(*pd.router, "remove",
                             {{"type", "decode"}, {"instance", pd.decode[0]->address()}},
                             {{"X-API-Key", kKey}});
        ASSERT_EQ(rm.status, 200) << rm.describe();
        const json body = completion_body("whose key", 3, false);
        EXPECT_TRUE(answer_ok(send_generation(*pd.router, body), body));
        auto on_p = sim_requests(*pd.prefill[0]);
        auto on_d2 = sim_requests(d2);
        ASSERT_FALSE(on_p.empty());
        ASSERT_FALSE(on_d2.empty());
        EXPECT_EQ(recorded_header(on_p.back(), "authorization"), "Bearer up-secret");
        EXPECT_EQ(recorded_header(on_d2.back(), "authorization"), allowed ? "Bearer up-secret" : "")
            << "allowed=" << allowed;
        // Probes too (the add's model probe, then the health loop's): the key only where it is
        // allowed.
        EXPECT_TRUE(wait_until([&] { return counter(sim_state(d2), "probes") >= 2; }, Ms{10000}))
            << sim_state(d2).dump();
        const json st = sim_state(d2);
        EXPECT_EQ(counter(st, "probes_with_key") > 0, allowed) << st.dump();
        EXPECT_GT(counter(sim_state(*pd.prefill[0]), "probes_with_key"), 0);
    }
}

TEST_F(AdminTest, AdminDisabledWithoutKey) {
    auto& pd = start(PdOptions{});
    for (const Headers& auth : {Headers{}, Headers{{"X-API-Key", "anything"}}}) {
        auto r =
            admin_post(*pd.router, "add", {{"type", "decode"}, {"instance", "127.0.0.1:1"}}, auth);
        EXPECT_EQ(r.status, 403) << r.describe();
        std::string msg;
        EXPECT_TRUE(is_openai_error(r.body, &msg)) << r.body;
        EXPECT_FALSE(msg.empty());
        std::cout << "admin disabled message: " << msg << "\n";
    }
    auto rr = admin_post(*pd.router, "remove",
                         {{"type", "decode"}, {"instance", pd.decode[0]->address()}}, {});
    EXPECT_EQ(rr.status, 403) << rr.describe();
}

// POST /internal/nixl/lease_refresh is an admin route: anonymous, it answers 401 (403 when no
// admin key is configured), never 200 (its answer tells which ids are in flight); with the
// key it takes at most 10000 ids.
TEST_F(AdminTest, LeaseRefreshNeedsTheAdminKey) {
    const std::string route = "/internal/nixl/lease_refresh";
    const json ids{{"request_ids", {"a", "b"}}};
    auto& closed = start(PdOptions{});
    for (const Headers& auth : {Headers{}, Headers{{"X-API-Key", "anything"}}}) {
        auto r = http_post_json(closed.router->port, route, ids, auth);
        EXPECT_EQ(r.status, 403) << r.describe();
        EXPECT_TRUE(is_openai_error(r.body)) << r.body;
    }

    auto& pd = start(PdOptions{}.router({"--admin-api-key", kKey}));
    auto anonymous = http_post_json(pd.router->port, route, ids);
    EXPECT_EQ(anonymous.status, 401) << anonymous.describe();
    EXPECT_TRUE(is_openai_error(anonymous.body)) << anonymous.body;
    auto wrong = http_post_json(pd.router->port, route, ids, {{"X-API-Key", "nope"}});
    EXPECT_EQ(wrong.status, 403) << wrong.describe();
    auto ok = http_post_json(pd.router->port, route, ids, {{"X-API-Key", kKey}});
    EXPECT_EQ(ok.status, 200) << ok.describe();
    EXPECT_EQ(ok.json().value("unknown", -1), 2) << ok.body;

    json many{{"request_ids", json::array()}};
    for (int i = 0; i < 10001; ++i) {
        many["request_ids"].push_back("id-" + std::to_string(i));
    }
    auto too_many = http_post_json(pd.router->port, route, many, {{"X-API-Key", kKey}});
    EXPECT_EQ(too_many.status, 400) << too_many.describe();
    EXPECT_TRUE(is_openai_error(too_many.body)) << too_many.body;
    many["request_ids"].erase(0);
    auto most = http_post_json(pd.router->port, route, many, {{"X-API-Key", kKey}});
    EXPECT_EQ(most.status, 200) << most.describe();
    auto m = metrics_text(*pd.router);
    EXPECT_EQ(metric(m, "pdrouter_admin_requests_total",
                     {{"action", "lease_refresh"}, {"result", "unauthorized"}})
                  .value_or(0),
              1.0)
        << m;
}

TEST_F(AdminTest, AddListRemoveWithAuthRules) {
    auto& pd = start(PdOptions{}.router({"--admin-api-key", kKey, "--model", kModel}));
    Cluster& extra = new_cluster();
    Server& d2 = extra.start_pdsim("decode");
    const json add_d2{{"type", "decode"}, {"instance", d2.address()}};

    auto missing = admin_post(*pd.router, "add", add_d2, {});
    EXPECT_EQ(missing.status, 401) << missing.describe();
    EXPECT_TRUE(is_openai_error(missing.body)) << missing.body;
    auto wrong = admin_post(*pd.router, "add", add_d2, {{"X-API-Key", "nope"}});
    EXPECT_EQ(wrong.status, 403) << wrong.describe();
    auto wrong_bearer = admin_post(*pd.router, "add", add_d2, {{"Authorization", "Bearer nope"}});
    EXPECT_EQ(wrong_bearer.status, 403) << wrong_bearer.describe();
    EXPECT_TRUE(find_instance(*pd.router, d2.address()).is_null());

    auto ok = admin_post(*pd.router, "add", add_d2, {{"X-API-Key", kKey}});
    EXPECT_EQ(ok.status, 200) << ok.describe();
    EXPECT_EQ(ok.json().value("message", ""), "Added " + d2.address() + " to decode_instances.")
        << ok.body;
    auto dup =
        admin_post(*pd.router, "add", add_d2, {{"Authorization", std::string("Bearer ") + kKey}});
    EXPECT_EQ(dup.status, 409) << dup.describe();
    EXPECT_TRUE(is_openai_error(dup.body)) << dup.body;

    auto listed = find_instance(*pd.router, d2.address());
    ASSERT_FALSE(listed.is_null())
        << http_get(pd.router->port, "/instances", {{"X-API-Key", kKey}}).body;
    EXPECT_EQ(listed.value("role", ""), "decode") << listed.dump();
    for (const char* key : {"up", "in_flight", "requests", "failures"}) {
        EXPECT_TRUE(listed.contains(key)) << key << " missing in " << listed.dump();
    }

    // The added decode takes traffic.
    for (int i = 0; i < 4; ++i) {
        json body = completion_body("after add " + std::to_string(i), 3, false);
        EXPECT_TRUE(answer_ok(send_generation(*pd.router, body), body));
    }
    auto d2_served = counter(sim_state(d2), "requests");
    EXPECT_GE(d2_served, 1) << "the added decode got no traffic";

    auto status = http_get(pd.router->port, "/status").json();
    EXPECT_EQ(status.value("decode_node_count", -1), 2) << status.dump();

    // Remove: no new requests reach it.
    auto rm = admin_post(*pd.router, "remove", add_d2, {{"X-API-Key", kKey}});
    EXPECT_EQ(rm.status, 200) << rm.describe();
    for (int i = 0; i < 4; ++i) {
        json body = chat_body("after remove " + std::to_string(i), 3, true);
        EXPECT_TRUE(answer_ok(send_generation(*pd.router, body), body));
    }
    EXPECT_EQ(counter(sim_state(d2), "requests"), d2_served);
    auto gone = find_instance(*pd.router, d2.address());
    EXPECT_TRUE(gone.is_null() || gone.value("removed", false)) << gone.dump();
    auto rm_again = admin_post(*pd.router, "remove", add_d2, {{"X-API-Key", kKey}});
    EXPECT_EQ(rm_again.status, 404) << rm_again.describe();

    // Validation.
    auto bad_type = admin_post(*pd.router, "add", {{"type", "middle"}, {"instance", d2.address()}},
                               {{"X-API-Key", kKey}});
    EXPECT_EQ(bad_type.status, 400) << bad_type.describe();
    auto bad_addr = admin_post(*pd.router, "add", {{"type", "prefill"}, {"instance", "no-port"}},
                               {{"X-API-Key", kKey}});
    EXPECT_EQ(bad_addr.status, 400) << bad_addr.describe();
    DeadPort dead;
    auto unreachable =
        admin_post(*pd.router, "add", {{"type", "prefill"}, {"instance", dead.address()}},
                   {{"X-API-Key", kKey}});
    EXPECT_GE(unreachable.status, 400) << unreachable.describe();
    EXPECT_NE(unreachable.status, 409);
    EXPECT_EQ(unreachable.json()["error"].value("code", ""), "upstream_connect_error")
        << unreachable.body;
    EXPECT_TRUE(find_instance(*pd.router, dead.address()).is_null());

    // A model mismatch is refused.
    Server& other = extra.start(
        "pdsim-other-model", pdsim_path(),
        {"--role", "prefill", "--host", "127.0.0.1", "--port", "0", "--model", "some-other-model"});
    auto mismatch =
        admin_post(*pd.router, "add", {{"type", "prefill"}, {"instance", other.address()}},
                   {{"X-API-Key", kKey}});
    EXPECT_GE(mismatch.status, 400) << mismatch.describe();
    EXPECT_NE(mismatch.status, 409);
    std::string msg;
    EXPECT_TRUE(is_openai_error(mismatch.body, &msg)) << mismatch.body;
    std::cout << "model mismatch: " << mismatch.status << " " << msg << "\n";
    EXPECT_TRUE(find_instance(*pd.router, other.address()).is_null());

    auto m = metrics_text(*pd.router);
    EXPECT_GE(metric(m, "pdrouter_admin_requests_total", {{"action", "add"}, {"result", "ok"}})
                  .value_or(0),
              1.0)
        << m;
    EXPECT_GE(metric(m, "pdrouter_admin_requests_total", {{"result", "unauthorized"}}).value_or(0),
              1.0)
        << m;
}

// A removed instance with a request in flight stays (listed as removed, its series kept) until
// that request ends; then it and its pdrouter_instance_* series go at once, not at the next
// health tick (60 s here).
TEST_F(AdminTest, RemovedInstanceGoesWhenItsLastRequestEnds) {
    auto& pd = start(PdOptions{}
                         .sim({"--token-delay-ms", "40"})
                         .router({"--admin-api-key", kKey, "--health-interval-ms", "60000"}));
    const std::string d = pd.decode[0]->address();
    const json body = chat_body("in flight across a remove", 25, true);  // about 1 s of tokens
    HttpResponse streamed;
    std::thread client([&] { streamed = send_generation(*pd.router, body); });
    auto in_flight = [&] {
        return metric(metrics_text(*pd.router), "pdrouter_instance_in_flight",
                      {{"role", "decode"}, {"instance", d}})
            .value_or(0);
    };
    EXPECT_TRUE(wait_until([&] { return in_flight() >= 1; }, Ms{5000}));
    auto rm = admin_post(*pd.router, "remove", {{"type", "decode"}, {"instance", d}},
                         {{"X-API-Key", kKey}});
    EXPECT_EQ(rm.status, 200) << rm.describe();
    EXPECT_TRUE(find_instance(*pd.router, d).value("removed", false));
    client.join();
    EXPECT_TRUE(answer_ok(streamed, body)) << streamed.describe();
    auto series_gone = [&] {
        auto m = metrics_text(*pd.router);
        return !metric(m, "pdrouter_instance_up", {{"role", "decode"}, {"instance", d}}) &&
               !metric(m, "pdrouter_instance_in_flight", {{"role", "decode"}, {"instance", d}});
    };
    EXPECT_TRUE(wait_until(series_gone, Ms{2000})) << metrics_text(*pd.router);
    EXPECT_TRUE(find_instance(*pd.router, d).is_null());
}

TEST_F(AdminTest, StatusHealthModels) {
    auto& pd = start(
        PdOptions{}.p(2).d(1).router({"--health-interval-ms", "200", "--health-backoff-max-ms",
                                      "400", "--admin-api-key", kKey, "--kv-mode", "pull"}));
    auto st = http_get(pd.router->port, "/status");
    ASSERT_EQ(st.status, 200) << st.describe();
    auto s = st.json();
    EXPECT_EQ(s.value("mode", ""), "pull") << st.body;
    EXPECT_EQ(s.value("prefill_node_count", -1), 2) << st.body;
    EXPECT_EQ(s.value("decode_node_count", -1), 1) << st.body;
    ASSERT_TRUE(s.contains("prefill_nodes") && s["prefill_nodes"].is_array()) << st.body;
    ASSERT_TRUE(s.contains("decode_nodes") && s["decode_nodes"].is_array()) << st.body;
    EXPECT_EQ(s["prefill_nodes"].size(), 2u);
    EXPECT_NE(s["decode_nodes"].dump().find(std::to_string(pd.decode[0]->port)), std::string::npos)
        << st.body;

    auto models = http_get(pd.router->port, "/v1/models");
    ASSERT_EQ(models.status, 200) << models.describe();
    auto mj = models.json();
    ASSERT_TRUE(mj.contains("data") && mj["data"].is_array() && !mj["data"].empty()) << models.body;
    EXPECT_EQ(mj["data"][0].value("id", ""), kModel);
    // The models call went to the decode instance and is counted there, like a leg.
    const json listed = find_instance(*pd.router, pd.decode[0]->address());
    EXPECT_EQ(listed.value("requests", -1), 1) << listed.dump();

    auto h = http_get(pd.router->port, "/health");
    EXPECT_EQ(h.status, 200) << h.describe();

    // No decode up → 503 (probes every 200 ms notice the dead one).
    pd.decode[0]->proc.kill_now();
    int last = 0;
    EXPECT_TRUE(wait_until(
        [&] {
            last = http_get(pd.router->port, "/health").status;
            return last == 503;
        },
        Ms{3000}))
        << "/health still " << last << " with no decode up";
    auto s2 = http_get(pd.router->port, "/status").json();
    std::cout << "/status with the decode down: " << s2.dump() << "\n";
    auto m = metrics_text(*pd.router);
    EXPECT_EQ(metric(m, "pdrouter_instances", {{"role", "decode"}, {"health", "down"}}), 1.0) << m;
    EXPECT_EQ(metric(m, "pdrouter_instances", {{"role", "prefill"}, {"health", "up"}}), 2.0) << m;
    auto r = send_generation(*pd.router, completion_body("no decode", 3, false));
    EXPECT_EQ(r.status, 503) << r.describe();
    EXPECT_TRUE(is_openai_error(r.body)) << r.body;
    // The 503 is counted where alerts look for upstream trouble, not only as a 5xx.
    auto after = metrics_text(*pd.router);
    EXPECT_EQ(metric(after, "pdrouter_upstream_errors_total",
                     {{"leg", "decode"}, {"kind", "no_instance"}}),
              1.0)
        << after;
}

// What the client port serves of a cluster that answered one request and failed three: a
// prefill 500 (error body), a decode that closed before answering (error body), a decode that
// closed mid-stream (SSE error event).
struct Served {
    std::string status, metrics, errors;
};

Served serve_and_fail(PdCluster& pd) {
    Served out;
    const json ok = completion_body("hidden or not", 3, false);
    EXPECT_TRUE(answer_ok(send_generation(*pd.router, ok), ok));
    sim_fault(*pd.prefill[0], {{"status", 500}, {"count", 1}});
    const auto p = send_generation(*pd.router, completion_body("prefill fails", 3, false));
    EXPECT_EQ(p.status, 502) << p.describe();
    EXPECT_TRUE(is_openai_error(p.body)) << p.body;
    sim_fault(*pd.decode[0], {{"close_before_response", true}, {"count", 1}});
    const auto d = send_generation(*pd.router, completion_body("decode drops it", 3, false));
    EXPECT_EQ(d.status, 502) << d.describe();
    EXPECT_TRUE(is_openai_error(d.body)) << d.body;
    sim_fault(*pd.decode[0], {{"close_after_chunks", 1}, {"count", 1}});
    const auto m = send_generation(*pd.router, completion_body("decode dies mid-stream", 8, true));
    EXPECT_EQ(m.status, 200) << m.describe();
    EXPECT_EQ(error_events(m.body).size(), 1u) << m.body;
    out.errors = p.body + "\n" + d.body + "\n" + m.body;
    out.status = http_get(pd.router->port, "/status").body;
    out.metrics = metrics_text(*pd.router);
    return out;
}

// Where `text` shows an address of one of the cluster's engines: "127.0.0.1" or ":<port>".
std::string address_in(const std::string& text, const PdCluster& pd) {
    if (text.find("127.0.0.1") != std::string::npos) {
        return "127.0.0.1";
    }
    for (const auto* group : {&pd.prefill, &pd.decode}) {
        for (const Server* s : *group) {
            const std::string port = ":" + std::to_string(s->port);
            if (text.find(port) != std::string::npos) {
                return port;
            }
        }
    }
    return {};
}

// --hide-instance-addresses: /status, /metrics and error bodies and events name instances
// prefill-N / decode-N, never by address; GET /instances (admin) keeps the address and shows
// the public name. Without the flag the same answers carry the addresses.
TEST_F(AdminTest, HideInstanceAddressesFromTheClientPort) {
    const std::vector<std::string> router{"--admin-api-key", kKey, "--health-interval-ms", "60000"};
    std::vector<std::string> hiding = router;
    hiding.push_back("--hide-instance-addresses");
    auto& hidden = start(PdOptions{}.sim({"--kv-lease-seconds", "1"}).router(hiding));
    const Served h = serve_and_fail(hidden);
    for (const auto* text : {&h.status, &h.metrics, &h.errors}) {
        EXPECT_EQ(address_in(*text, hidden), "") << *text;
    }
    const json st = json::parse(h.status);
    EXPECT_EQ(st["prefill_nodes"], json::array({"prefill-0"})) << h.status;
    EXPECT_EQ(st["decode_nodes"], json::array({"decode-0"})) << h.status;
    EXPECT_EQ(metric(h.metrics, "pdrouter_instance_up", {{"instance", "prefill-0"}}), 1.0)
        << h.metrics;
    EXPECT_EQ(metric(h.metrics, "pdrouter_instance_requests_total", {{"instance", "decode-0"}})
                  .value_or(0),
              3.0)
        << h.metrics;
    EXPECT_NE(h.errors.find("prefill instance prefill-0 answered HTTP 500"), std::string::npos)
        << h.errors;
    EXPECT_NE(h.errors.find("decode-0: "), std::string::npos) << h.errors;
    const json p = find_instance(*hidden.router, hidden.prefill[0]->address());
    EXPECT_EQ(p.value("public_name", ""), "prefill-0") << p.dump();
    const json d = find_instance(*hidden.router, hidden.decode[0]->address());
    EXPECT_EQ(d.value("public_name", ""), "decode-0") << d.dump();

    // The same without the flag: the addresses are there.
    auto& shown = start(PdOptions{}.sim({"--kv-lease-seconds", "1"}).router(router));
    const Served s = serve_and_fail(shown);
    const std::string p_addr = shown.prefill[0]->address(), d_addr = shown.decode[0]->address();
    EXPECT_NE(s.status.find(p_addr), std::string::npos) << s.status;
    EXPECT_NE(s.status.find(d_addr), std::string::npos) << s.status;
    EXPECT_NE(s.metrics.find("instance=\"" + d_addr + "\""), std::string::npos) << s.metrics;
    EXPECT_NE(s.errors.find("prefill instance " + p_addr), std::string::npos) << s.errors;
    EXPECT_NE(s.errors.find(d_addr + ": "), std::string::npos) << s.errors;
    EXPECT_EQ(find_instance(*shown.router, d_addr).value("public_name", ""), d_addr);
}

}  // namespace
}  // namespace pdr::test
