// pdsim alone over loopback: a prefill and a decode SimServer in-process, driven by libcurl
// through a full pull-mode handover, the debug API, and a few injected faults.
#include "sim/generation.hpp"
#include "sim/kv_store.hpp"
#include "sim/sim_server.hpp"
#include "tests/unit/sim/curl_util.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <sys/socket.h>
#include <sys/time.h>

#include <future>
#include <thread>

namespace pdr::sim {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;
using namespace pdr::sim::test_util;

json prefill_body(const std::string& prompt) {
    return json{{"model", "pdsim-model"},
                {"prompt", prompt},
                {"max_tokens", 1},
                {"stream", false},
                {"kv_transfer_params",
                 {{"do_remote_decode", true},
                  {"do_remote_prefill", false},
                  {"remote_engine_id", nullptr},
                  {"remote_block_ids", nullptr},
                  {"remote_host", nullptr},
                  {"remote_port", nullptr}}}};
}

class Loopback : public ::testing::Test {
protected:
    static void SetUpTestSuite() { curl_global_init(CURL_GLOBAL_ALL); }

    void SetUp() override {
        SimConfig p;
        p.role = Role::Prefill;
        p.block_size_tokens = 4;
        prefill_ = std::make_unique<SimServer>(ioc_.get_executor(), p);
        pport_ = prefill_->start();
        SimConfig sp = p;
        sp.kv_lease_seconds = 0.6;
        short_prefill_ = std::make_unique<SimServer>(ioc_.get_executor(), sp);
        sport_ = short_prefill_->start();
        SimConfig d;
        d.role = Role::Decode;
        decode_ = std::make_unique<SimServer>(ioc_.get_executor(), d);
        dport_ = decode_->start();
        thread_ = std::thread([this] { ioc_.run(); });
    }

    void TearDown() override {
        for (auto* s : {prefill_.get(), short_prefill_.get(), decode_.get()}) {
            auto done = net::co_spawn(ioc_, s->stop(), net::use_future);
            EXPECT_EQ(done.wait_for(10s), std::future_status::ready);
        }
        work_.reset();
        ioc_.stop();
        thread_.join();
        decode_.reset();
        short_prefill_.reset();
        prefill_.reset();
    }

    json state(unsigned short port) {
        auto r = call("GET", port, "/debug/state");
        EXPECT_EQ(r.status, 200);
        return json::parse(r.body);
    }

    // Runs the prefill leg by hand; returns P's kv_transfer_params.
    json prefill(unsigned short port, const std::string& prompt, const std::string& rid) {
        auto r = call("POST", port, "/v1/completions", prefill_body(prompt).dump(),
                      {"X-Request-Id: " + rid});
        EXPECT_EQ(r.status, 200) << r.body;
        auto j = json::parse(r.body);
        EXPECT_EQ(j["choices"][0]["text"], token_text(prompt, 0));
        EXPECT_EQ(j["usage"]["completion_tokens"], 1);
        return j["kv_transfer_params"];
    }

    net::io_context ioc_;
    net::executor_work_guard<net::io_context::executor_type> work_{ioc_.get_executor()};
    std::unique_ptr<SimServer> prefill_, short_prefill_, decode_;
    unsigned short pport_ = 0, sport_ = 0, dport_ = 0;
    std::thread thread_;
};

TEST_F(Loopback, PullHandoverStreamsAndFreesPrefillBlocks) {
    const std::string prompt = "one two three four five six seven eight nine";  // 9 words
    auto kv = prefill(pport_, prompt, "req-handover");
    ASSERT_TRUE(kv.is_object());
    EXPECT_EQ(kv["do_remote_prefill"], true);
    EXPECT_EQ(kv["do_remote_decode"], false);
    EXPECT_EQ(kv["remote_request_id"], "req-handover");
    EXPECT_EQ(kv["remote_engine_id"], prefill_->config().engine_id);
    EXPECT_EQ(kv["remote_engine_id"], "pdsim-prefill-" + std::to_string(pport_));
    EXPECT_EQ(kv["remote_host"], "127.0.0.1");
    EXPECT_EQ(kv["remote_port"], pport_);
    EXPECT_EQ(kv["remote_num_tokens"], 9);
    EXPECT_EQ(kv["transfer_mode"], "pull");
    ASSERT_EQ(kv["remote_block_ids"].size(), 3u);  // ceil(9 / 4)

    auto ps = state(pport_);
    EXPECT_EQ(ps["blocks_held"], 3);
    EXPECT_EQ(ps["requests_held"], 1);
    EXPECT_EQ(ps["protocol_violations"], 0) << ps["violations"];

    json d{{"model", "pdsim-model"},
           {"prompt", prompt},
           {"max_tokens", 12},
           {"stream", true},
           {"kv_transfer_params", kv}};
    auto r = call("POST", dport_, "/v1/completions", d.dump(), {"X-Request-Id: req-handover"});
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.content_type, "text/event-stream");
    auto events = sse_payloads(r.body);
    ASSERT_EQ(events.size(), 13u);
    EXPECT_EQ(events.back(), "[DONE]");
    std::string text;
    for (std::size_t i = 0; i + 1 < events.size(); ++i) {
        auto c = json::parse(events[i]);
        EXPECT_EQ(c["object"], "text_completion");
        text += c["choices"][0]["text"].get<std::string>();
    }
    EXPECT_EQ(text, generate_text(prompt, 12));
    EXPECT_EQ(json::parse(events[11])["choices"][0]["finish_reason"], "length");

    ps = state(pport_);
    EXPECT_EQ(ps["blocks_held"], 0);
    EXPECT_EQ(ps["freed_by_read"], 1);
    auto ds = state(dport_);
    EXPECT_EQ(ds["kv_reads"], 1);
    EXPECT_EQ(ds["local_prefills"], 0);
    EXPECT_EQ(ds["completed"], 1);
    EXPECT_EQ(ds["protocol_violations"], 0);
}

TEST_F(Loopback, ChatHandoverAndLocalChatStreamWithUsage) {
    json msgs = json::array({json{{"role", "user"}, {"content", "tell me a story"}}});
    json pb{{"messages", msgs},
            {"max_tokens", 1},
            {"max_completion_tokens", 1},
            {"stream", false},
            {"kv_transfer_params", prefill_body("x")["kv_transfer_params"]}};
    auto pr = call("POST", pport_, "/v1/chat/completions", pb.dump(), {"X-Request-Id: chat-1"});
    ASSERT_EQ(pr.status, 200) << pr.body;
    auto pj = json::parse(pr.body);
    EXPECT_EQ(pj["object"], "chat.completion");
    EXPECT_EQ(pj["choices"][0]["message"]["content"], token_text("tell me a story", 0));

    json db{{"messages", msgs},
            {"max_completion_tokens", 5},
            {"kv_transfer_params", pj["kv_transfer_params"]}};
    auto dr = call("POST", dport_, "/v1/chat/completions", db.dump());
    ASSERT_EQ(dr.status, 200) << dr.body;
    auto dj = json::parse(dr.body);
    EXPECT_EQ(dj["choices"][0]["message"]["content"], generate_text("tell me a story", 5));
    EXPECT_EQ(dj["usage"]["prompt_tokens"], 4);
    EXPECT_EQ(state(pport_)["freed_by_read"], 1);

    // Direct to decode (no handle): served locally, streamed with a usage chunk.
    json lb{{"messages", msgs},
            {"max_tokens", 3},
            {"stream", true},
            {"stream_options", {{"include_usage", true}}}};
    auto lr = call("POST", dport_, "/v1/chat/completions", lb.dump());
    ASSERT_EQ(lr.status, 200);
    auto events = sse_payloads(lr.body);
    ASSERT_EQ(events.size(), 6u);  // role, 3 tokens, usage, [DONE]
    auto first = json::parse(events[0]);
    EXPECT_EQ(first["object"], "chat.completion.chunk");
    EXPECT_EQ(first["choices"][0]["delta"]["role"], "assistant");
    std::string text;
    for (int i = 1; i <= 3; ++i) {
        text += json::parse(events[i])["choices"][0]["delta"]["content"].get<std::string>();
    }
    EXPECT_EQ(text, generate_text("tell me a story", 3));
    auto usage = json::parse(events[4]);
    EXPECT_TRUE(usage["choices"].empty());
    EXPECT_EQ(usage["usage"]["completion_tokens"], 3);
    EXPECT_EQ(events[5], "[DONE]");
    EXPECT_EQ(state(dport_)["local_prefills"], 1);
}

TEST_F(Loopback, PrefillCountsRewriteViolationsButAnswers) {
    json b{{"prompt", "p q"},
           {"max_tokens", 8},
           {"stream", true},
           {"kv_transfer_params", {{"do_remote_decode", true}}}};
    auto r = call("POST", pport_, "/v1/completions", b.dump());  // no X-Request-Id either
    ASSERT_EQ(r.status, 200) << r.body;
    auto j = json::parse(r.body);
    EXPECT_EQ(j["usage"]["completion_tokens"], 1);
    EXPECT_TRUE(j["kv_transfer_params"].is_object());
    EXPECT_EQ(j["kv_transfer_params"]["remote_request_id"].get<std::string>().size(), 36u);
    auto s = state(pport_);
    EXPECT_EQ(s["protocol_violations"], 3);
    EXPECT_EQ(s["violations"].size(), 3u);

    // Without kv_transfer_params there is no handle and nothing is held.
    auto plain = call("POST", pport_, "/v1/completions", R"({"prompt":"p q","max_tokens":1})");
    ASSERT_EQ(plain.status, 200);
    EXPECT_TRUE(json::parse(plain.body)["kv_transfer_params"].is_null());
    EXPECT_EQ(state(pport_)["requests_held"], 1);
}

TEST_F(Loopback, DecodeRejectsInvalidHandle) {
    json b{{"prompt", "p"}, {"kv_transfer_params", {{"do_remote_prefill", true}}}};
    auto r = call("POST", dport_, "/v1/completions", b.dump());
    EXPECT_EQ(r.status, 400);
    EXPECT_EQ(json::parse(r.body)["error"]["type"], "invalid_request_error");
    EXPECT_EQ(state(dport_)["protocol_violations"], 1);
}

TEST_F(Loopback, DecodeFaultStatusReleasesPrefillBlocks) {
    auto kv = prefill(pport_, "release me please", "req-503");
    auto f = call("POST", dport_, "/debug/faults", R"({"status":503})");
    ASSERT_EQ(f.status, 200);
    json d{{"prompt", "release me please"}, {"kv_transfer_params", kv}};
    auto r = call("POST", dport_, "/v1/completions", d.dump());
    EXPECT_EQ(r.status, 503);
    EXPECT_EQ(json::parse(r.body)["error"]["code"], 503);
    EXPECT_TRUE(wait_until([&] { return state(pport_)["freed_by_abort"] == 1; }));
    EXPECT_EQ(state(pport_)["blocks_held"], 0);
    EXPECT_EQ(state(dport_)["faults_applied"], 1);
    // The fault applied once: the next request is answered.
    EXPECT_EQ(call("POST", dport_, "/v1/completions", R"({"prompt":"x"})").status, 200);
}

TEST_F(Loopback, ExpiredLeaseFailsTheDecodeRead) {
    auto kv = prefill(sport_, "short lease prompt", "req-expire");
    EXPECT_EQ(state(sport_)["blocks_held"], 1);
    EXPECT_TRUE(wait_until([&] { return state(sport_)["freed_by_expiry"] == 1; }));
    EXPECT_EQ(state(sport_)["blocks_held"], 0);
    json d{{"prompt", "short lease prompt"}, {"kv_transfer_params", kv}};
    auto r = call("POST", dport_, "/v1/completions", d.dump());
    EXPECT_EQ(r.status, 500);
    auto err = json::parse(r.body)["error"];
    EXPECT_EQ(err["message"], "KV blocks no longer held by prefill");
    EXPECT_EQ(err["type"], "server_error");
    EXPECT_EQ(state(dport_)["kv_read_failures"], 1);
}

TEST_F(Loopback, LeaseRefreshKeepsBlocksAlive) {
    prefill(sport_, "refresh me", "req-refresh");
    // Refresh well inside the 600 ms lease for 1.5 s: the blocks must survive.
    const auto until = std::chrono::steady_clock::now() + 1500ms;
    int calls = 0;
    while (std::chrono::steady_clock::now() < until) {
        auto r = call("POST", sport_, "/internal/nixl/lease_refresh",
                      R"({"request_ids":["req-refresh","nobody"]})");
        ASSERT_EQ(r.status, 200);
        auto j = json::parse(r.body);
        ASSERT_EQ(j["refreshed"], 1) << "blocks expired despite refreshes";
        EXPECT_EQ(j["unknown"], 1);
        ++calls;
        std::this_thread::sleep_for(50ms);
    }
    auto s = state(sport_);
    EXPECT_EQ(s["freed_by_expiry"], 0);
    EXPECT_EQ(s["lease_refresh_calls"], calls);
    EXPECT_EQ(s["lease_refreshes"], calls);
    EXPECT_EQ(s["lease_refresh_unknown"], calls);
    // Once refreshes stop, the lease runs out.
    EXPECT_TRUE(wait_until([&] { return state(sport_)["freed_by_expiry"] == 1; }));
}

// Like vLLM's server, pdsim closes a kept-alive connection that stays idle for --keep-alive-ms
// (clients that pool connections must not send on one it is closing).
TEST(LoopbackKeepAlive, IdleConnectionIsClosedAfterTheKeepAlive) {
    net::io_context ioc;
    SimConfig c;
    c.role = Role::Decode;
    c.keep_alive = Duration{200};
    SimServer sim(ioc.get_executor(), c);
    const unsigned short port = sim.start();
    std::thread runner([&] { ioc.run(); });
    tcp::socket s(ioc);
    s.connect({net::ip::make_address("127.0.0.1"), port});
    const std::string req = "GET /health HTTP/1.1\r\nHost: pdsim\r\n\r\n";
    net::write(s, net::buffer(req));
    beast::flat_buffer buf;
    http::response<http::string_body> res;
    http::read(s, buf, res);
    EXPECT_EQ(res.result_int(), 200u);
    EXPECT_TRUE(res.keep_alive());
    const auto answered = std::chrono::steady_clock::now();
    // A receive timeout bounds the wait for the server's close.
    struct timeval tv {
        3, 0
    };
    ASSERT_EQ(::setsockopt(s.native_handle(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv), 0);
    char byte = 0;
    const ssize_t n = ::recv(s.native_handle(), &byte, 1, 0);
    const auto waited = std::chrono::steady_clock::now() - answered;
    EXPECT_EQ(n, 0) << "expected the server to close the idle connection";
    EXPECT_GE(waited, 150ms);
    EXPECT_LT(waited, 2500ms);
    s.close();
    auto done = net::co_spawn(ioc, sim.stop(), net::use_future);
    EXPECT_EQ(done.wait_for(10s), std::future_status::ready);
    ioc.stop();
    runner.join();
}

TEST_F(Loopback, ClientDisconnectMidStreamIsCounted) {
    ASSERT_EQ(call("POST", dport_, "/debug/faults", R"({"token_delay_ms":50})").status, 200);
    json b{{"prompt", "slow stream"}, {"max_tokens", 100}, {"stream", true}};
    auto r = call("POST", dport_, "/v1/completions", b.dump(), {}, 2);
    EXPECT_EQ(r.code, CURLE_WRITE_ERROR);
    EXPECT_TRUE(wait_until([&] {
        auto s = state(dport_);
        return s["client_disconnects"] == 1 && s["in_flight"] == 0;
    }));
    EXPECT_EQ(state(dport_)["completed"], 0);
}

TEST_F(Loopback, ClientGoneDuringDelayReleasesPrefillBlocks) {
    auto kv = prefill(pport_, "abandon me", "req-gone");
    ASSERT_EQ(call("POST", dport_, "/debug/faults", R"({"delay_ms":5000})").status, 200);
    json d{{"prompt", "abandon me"}, {"kv_transfer_params", kv}};
    auto r = call("POST", dport_, "/v1/completions", d.dump(), {}, 0, 300);
    EXPECT_EQ(r.code, CURLE_OPERATION_TIMEDOUT);
    EXPECT_TRUE(wait_until([&] { return state(pport_)["freed_by_abort"] == 1; }, 3000ms));
    EXPECT_TRUE(wait_until([&] { return state(dport_)["client_disconnects"] == 1; }, 3000ms));
    EXPECT_EQ(state(dport_)["kv_reads"], 0);
}

TEST_F(Loopback, CloseAfterChunksTruncatesTheStream) {
    ASSERT_EQ(call("POST", dport_, "/debug/faults", R"({"close_after_chunks":2})").status, 200);
    json b{{"prompt", "cut"}, {"max_tokens", 10}, {"stream", true}};
    auto r = call("POST", dport_, "/v1/completions", b.dump());
    EXPECT_NE(r.code, CURLE_OK);
    EXPECT_EQ(r.status, 200);
    EXPECT_EQ(r.body.find("[DONE]"), std::string::npos);
    auto events = sse_payloads(r.body);
    EXPECT_EQ(events.size(), 2u);
    auto s = state(dport_);
    EXPECT_EQ(s["client_disconnects"], 0);
    EXPECT_EQ(s["completed"], 0);
}

TEST_F(Loopback, CloseBeforeResponseAndOmitKvParams) {
    ASSERT_EQ(call("POST", dport_, "/debug/faults", R"({"close_before_response":true})").status,
              200);
    auto r = call("POST", dport_, "/v1/completions", R"({"prompt":"x"})");
    EXPECT_EQ(r.code, CURLE_GOT_NOTHING);

    ASSERT_EQ(call("POST", pport_, "/debug/faults", R"({"omit_kv_params":true})").status, 200);
    auto p = call("POST", pport_, "/v1/completions", prefill_body("no handle").dump(),
                  {"X-Request-Id: r-omit"});
    ASSERT_EQ(p.status, 200);
    EXPECT_TRUE(json::parse(p.body)["kv_transfer_params"].is_null());
    EXPECT_EQ(state(pport_)["blocks_held"], 0);
}

TEST_F(Loopback, InfoEndpointsAndDebugApi) {
    auto m = call("GET", dport_, "/v1/models");
    ASSERT_EQ(m.status, 200);
    auto mj = json::parse(m.body);
    EXPECT_EQ(mj["object"], "list");
    EXPECT_EQ(mj["data"][0]["id"], "pdsim-model");
    EXPECT_EQ(mj["data"][0]["owned_by"], "pdsim");
    EXPECT_EQ(mj["data"][0]["max_model_len"], kMaxModelLen);
    EXPECT_EQ(call("GET", dport_, "/health").status, 200);
    auto met = call("GET", dport_, "/metrics");
    EXPECT_EQ(met.status, 200);
    EXPECT_NE(met.body.find("vllm:num_requests_running{model_name=\"pdsim-model\"}"),
              std::string::npos);
    auto t = call("POST", dport_, "/tokenize", R"({"prompt":"a b c"})");
    ASSERT_EQ(t.status, 200);
    EXPECT_EQ(json::parse(t.body)["count"], 3);
    EXPECT_EQ(call("GET", dport_, "/nope").status, 404);
    EXPECT_EQ(call("GET", dport_, "/v1/completions").status, 405);
    auto bad = call("POST", dport_, "/v1/completions", "{broken");
    EXPECT_EQ(bad.status, 400);
    EXPECT_EQ(json::parse(bad.body)["error"]["type"], "invalid_request_error");

    call("POST", dport_, "/v1/completions", R"({"prompt":"logged","max_tokens":2})",
         {"X-Request-Id: log-1", "Authorization: Bearer k"});
    auto reqs = json::parse(call("GET", dport_, "/debug/requests").body)["requests"];
    ASSERT_EQ(reqs.size(), 2u);  // the bad one and this one
    EXPECT_EQ(reqs[0]["body"], "{broken");
    EXPECT_EQ(reqs[1]["path"], "/v1/completions");
    EXPECT_EQ(reqs[1]["headers"]["x-request-id"], "log-1");
    EXPECT_EQ(reqs[1]["headers"]["authorization"], "Bearer k");
    EXPECT_EQ(reqs[1]["body"]["max_tokens"], 2);

    auto s = state(dport_);
    EXPECT_EQ(s["role"], "decode");
    EXPECT_EQ(s["port"], dport_);
    EXPECT_EQ(s["requests"], 2);
    EXPECT_EQ(s["completed"], 1);
    ASSERT_EQ(call("POST", dport_, "/debug/reset", "{}").status, 200);
    s = state(dport_);
    EXPECT_EQ(s["requests"], 0);
    EXPECT_TRUE(json::parse(call("GET", dport_, "/debug/requests").body)["requests"].empty());
}

// --prefill-delay-ms: the prompt's compute comes first. A prefill leg takes at least the delay,
// and while it is in the delay its blocks are not held yet.
TEST(LoopbackPrefillDelay, PrefillLegWaitsBeforeHoldingItsBlocks) {
    curl_global_init(CURL_GLOBAL_ALL);
    net::io_context ioc;
    auto work = net::make_work_guard(ioc);
    SimConfig c;
    c.role = Role::Prefill;
    c.block_size_tokens = 4;
    c.prefill_delay = Duration{800};
    SimServer sim(ioc.get_executor(), c);
    const unsigned short port = sim.start();
    std::thread runner([&] { ioc.run(); });
    const auto t0 = std::chrono::steady_clock::now();
    auto leg = std::async(std::launch::async, [port] {
        return call("POST", port, "/v1/completions", prefill_body("a b c d e").dump(),
                    {"X-Request-Id: delayed"});
    });
    // Bounded poll until the request is in flight, then look at the pool while it waits.
    json st;
    for (int i = 0; i < 200; ++i) {
        st = json::parse(call("GET", port, "/debug/state").body);
        if (st["in_flight"].get<long long>() > 0) {
            break;
        }
        std::this_thread::sleep_for(5ms);
    }
    const auto seen = std::chrono::steady_clock::now() - t0;
    EXPECT_EQ(st["in_flight"], 1);
    if (seen < 700ms) {  // still inside the delay
        EXPECT_EQ(st["blocks_held"], 0);
    }
    auto r = leg.get();
    const auto took = std::chrono::steady_clock::now() - t0;
    EXPECT_EQ(r.status, 200) << r.body;
    EXPECT_GE(took, 800ms);
    EXPECT_EQ(json::parse(call("GET", port, "/debug/state").body)["blocks_held"], 2);
    auto done = net::co_spawn(ioc, sim.stop(), net::use_future);
    EXPECT_EQ(done.wait_for(10s), std::future_status::ready);
    work.reset();
    ioc.stop();
    runner.join();
}

// --decode-setup-delay-ms: a decode leg that carries KV parameters waits D's setup before the KV
// moves, and still gives the handover's text and takes the KV.
TEST(LoopbackDecodeSetupDelay, KvLegWaitsTheSetupBeforeTheRead) {
    curl_global_init(CURL_GLOBAL_ALL);
    net::io_context ioc;
    auto work = net::make_work_guard(ioc);
    SimConfig pc;
    pc.role = Role::Prefill;
    pc.block_size_tokens = 4;
    SimServer prefill(ioc.get_executor(), pc);
    const unsigned short pport = prefill.start();
    SimConfig dc;
    dc.role = Role::Decode;
    dc.decode_setup_delay = Duration{600};
    SimServer decode(ioc.get_executor(), dc);
    const unsigned short dport = decode.start();
    std::thread runner([&] { ioc.run(); });
    const std::string prompt = "a b c d e f";
    auto p = call("POST", pport, "/v1/completions", prefill_body(prompt).dump(),
                  {"X-Request-Id: setup"});
    ASSERT_EQ(p.status, 200) << p.body;
    json d{{"model", "pdsim-model"},
           {"prompt", prompt},
           {"max_tokens", 3},
           {"kv_transfer_params", json::parse(p.body)["kv_transfer_params"]}};
    const auto t0 = std::chrono::steady_clock::now();
    auto r = call("POST", dport, "/v1/completions", d.dump(), {"X-Request-Id: setup"});
    EXPECT_GE(std::chrono::steady_clock::now() - t0, 600ms);
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(json::parse(r.body)["choices"][0]["text"], generate_text(prompt, 3));
    EXPECT_EQ(json::parse(call("GET", dport, "/debug/state").body)["kv_reads"], 1);
    for (auto* s : {&prefill, &decode}) {
        auto done = net::co_spawn(ioc, s->stop(), net::use_future);
        EXPECT_EQ(done.wait_for(10s), std::future_status::ready);
    }
    work.reset();
    ioc.stop();
    runner.join();
}

}  // namespace
}  // namespace pdr::sim
