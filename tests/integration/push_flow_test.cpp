// Push mode through the router (docs/protocols.md "Push mode", --kv-mode push) with pdsim
// engines moving real KV bytes over the transfer core (UCX tcp and shared memory): both legs at
// once, exact text, bytes verified on D, both arrival orders, 2P2D, the failure matrix (P fails:
// D's leg cancelled; D fails or the client leaves: P told to drop the transfer), the
// transfer_mode check, fresh transfer ids on retries, the router's transfer agent (Abort,
// Heartbeat renewal, P's copies of the write's terminal note, its Failed ending D's wait), and
// a prefill or decode killed mid-transfer.
#include <gtest/gtest.h>

#include <signal.h>

#include <atomic>
#include <future>
#include <iostream>
#include <set>
#include <thread>

#include "tests/support/checks.hpp"
#include "tests/support/fixture.hpp"

namespace pdr::test {
namespace {

using nlohmann::json;

struct Transport {
    const char* name;
    const char* tls;
    const char* devices;
};
constexpr Transport kTcp{"tcp", "tcp", "lo"};
constexpr Transport kShm{"shm", "posix,self", ""};

std::vector<std::string> sim_kv(const Transport& t, const std::string& mode) {
    std::vector<std::string> a{"--kv-mode", mode, "--kv-transports", t.tls};
    if (*t.devices) {
        a.insert(a.end(), {"--kv-net-devices", t.devices});
    }
    return a;
}

std::string words(int n) {
    std::string s;
    for (int i = 0; i < n; ++i) {
        s += (i ? " w" : "w") + std::to_string(i);
    }
    return s;
}

struct PushOptions {
    int prefills = 1, decodes = 1;
    Transport transport = kTcp;
    bool agent = false;
    std::string mode = "push";              // the engines' mode (the router runs push)
    std::vector<std::string> prefill_args;  // extra pdsim flags
    std::vector<std::string> decode_args;
    std::vector<std::string> router_args;
    std::vector<std::string> extra_prefills;  // addresses (e.g. a dead port) put first
};

class PushFlowTest : public ClusterTest {
protected:
    PdCluster start_push(const PushOptions& o) {
        PdCluster pd;
        std::vector<std::string> ps = o.extra_prefills, ds, ids, ports;
        for (std::size_t i = 0; i < o.extra_prefills.size(); ++i) {
            ids.push_back("dead-" + std::to_string(i));
            ports.push_back(o.extra_prefills[i].substr(o.extra_prefills[i].rfind(':') + 1));
        }
        for (int i = 0; i < o.prefills; ++i) {
            auto a = sim_kv(o.transport, o.mode);
            a.insert(a.end(), o.prefill_args.begin(), o.prefill_args.end());
            Server& p = pd.cluster->start_pdsim("prefill", a);
            pd.prefill.push_back(&p);
            ps.push_back(p.address());
            ids.push_back(sim_state(p)["engine_id"].get<std::string>());
            ports.push_back(std::to_string(p.port));  // pdsim's side channel is its HTTP port
        }
        for (int i = 0; i < o.decodes; ++i) {
            auto a = sim_kv(o.transport, o.mode == "pull" ? "pull" : "push");
            a.insert(a.end(), o.decode_args.begin(), o.decode_args.end());
            Server& d = pd.cluster->start_pdsim("decode", a);
            pd.decode.push_back(&d);
            ds.push_back(d.address());
        }
        std::vector<std::string> r{"--kv-mode", "push", "--prefill-engine-ids"};
        r.insert(r.end(), ids.begin(), ids.end());
        r.push_back("--prefill-side-channel-ports");
        r.insert(r.end(), ports.begin(), ports.end());
        if (o.agent) {
            r.insert(r.end(), {"--transfer-agent", "--transfer-agent-transports", o.transport.tls});
        }
        r.insert(r.end(), o.router_args.begin(), o.router_args.end());
        pd.router = &pd.cluster->start_router(ps, ds, r);
        return pd;
    }
    static long long held(const PdCluster& pd) { return sum_counter(pd.prefill, "blocks_held"); }
    static bool blocks_freed(const PdCluster& pd, Ms bound = Ms{3000}) {
        return wait_until([&] { return held(pd) == 0; }, bound);
    }
};

// The transfer ids the engines saw, by request id: P's and D's must be one per dispatch.
std::string transfer_id_of(const json& entry) {
    const json& body = entry["body"];
    if (!body.is_object() || !body.contains("kv_transfer_params")) {
        return {};
    }
    return body["kv_transfer_params"].value("transfer_id", "");
}

class PushTransportTest : public PushFlowTest, public ::testing::WithParamInterface<Transport> {};

TEST_P(PushTransportTest, BothLegsAtOnceGiveTheExactTextWithVerifiedBytes) {
    PushOptions o;
    o.transport = GetParam();
    o.prefills = 2;
    o.decodes = 2;
    PdCluster pd = start_push(o);
    std::set<std::string> transfer_ids;
    for (int i = 0; i < 4; ++i) {
        const bool stream = i % 2 == 1;
        const json body = completion_body(words(30 + i), 6, stream);
        const std::string id = "push-" + std::to_string(i);
        auto r = send_generation(*pd.router, body, {{"X-Request-Id", id}});
        EXPECT_TRUE(answer_ok(r, body)) << r.describe() << pd.cluster->logs();
        // P got the pull-mode prefill body plus the transfer id; D the push parameters naming
        // P, with the same transfer id and no block ids.
        std::string p_xfer, d_xfer;
        json d_params;
        for (Server* p : pd.prefill) {
            for (const auto& e : requests_with_id(*p, id)) {
                p_xfer = transfer_id_of(e);
                EXPECT_EQ(e["body"]["max_tokens"], 1);
                EXPECT_EQ(e["body"]["kv_transfer_params"]["do_remote_decode"], true);
            }
        }
        for (Server* d : pd.decode) {
            for (const auto& e : requests_with_id(*d, id)) {
                d_xfer = transfer_id_of(e);
                d_params = e["body"]["kv_transfer_params"];
            }
        }
        EXPECT_EQ(p_xfer, d_xfer);
        EXPECT_EQ(p_xfer.rfind("xfer-", 0), 0u) << p_xfer;
        EXPECT_TRUE(transfer_ids.insert(p_xfer).second) << "transfer id reused: " << p_xfer;
        EXPECT_EQ(d_params["do_remote_prefill"], true);
        EXPECT_EQ(d_params["remote_request_id"], id);
        EXPECT_FALSE(d_params.contains("remote_block_ids"));
    }
    EXPECT_GE(sum_counter(pd.decode, "kv_blocks_verified"), 4);
    EXPECT_TRUE(blocks_freed(pd));
    EXPECT_TRUE(no_violations(pd));
}

INSTANTIATE_TEST_SUITE_P(Ucx, PushTransportTest, ::testing::Values(kTcp, kShm),
                         [](const auto& p) { return std::string(p.param.name); });

TEST_F(PushFlowTest, BothArrivalOrdersWork) {
    PdCluster pd = start_push({});
    const json body = completion_body(words(25), 5, true);
    sim_fault(*pd.prefill[0], {{"kv_write_delay_ms", 300}});  // D registers first
    auto r = send_generation(*pd.router, body);
    EXPECT_TRUE(answer_ok(r, body)) << r.describe();
    sim_fault(*pd.decode[0], {{"kv_register_delay_ms", 300}});  // P finishes first
    r = send_generation(*pd.router, body);
    EXPECT_TRUE(answer_ok(r, body)) << r.describe();
    EXPECT_TRUE(blocks_freed(pd));
}

TEST_F(PushFlowTest, PrefillFailureCancelsTheDecodeAndTheClientGetsItsError) {
    PdCluster pd = start_push({});
    const json body = completion_body(words(20), 5, false);
    sim_fault(*pd.prefill[0], {{"status", 500}, {"body", "{\"error\":\"boom\"}"}});
    auto r = send_generation(*pd.router, body);
    EXPECT_EQ(r.status, 502) << r.describe();
    EXPECT_NE(r.body.find("prefill instance"), std::string::npos) << r.body;
    // D's leg was cancelled: it dropped its registration and its blocks. (Bounds for a loaded
    // machine: 1 s was missed with the suite running beside it.)
    EXPECT_TRUE(
        wait_until([&] { return sum_counter(pd.decode, "kv_blocks_taken") == 0; }, Ms{5000}));
    EXPECT_TRUE(
        wait_until([&] { return sum_counter(pd.decode, "client_disconnects") == 1; }, Ms{5000}));
    // P's 4xx goes to the client as it is.
    sim_fault(*pd.prefill[0], {{"status", 400}, {"body", "{\"error\":\"bad prompt\"}"}});
    r = send_generation(*pd.router, body);
    EXPECT_EQ(r.status, 400) << r.describe();
    EXPECT_NE(r.body.find("bad prompt"), std::string::npos);
    EXPECT_TRUE(blocks_freed(pd));
}

TEST_F(PushFlowTest, AStreamWhoseHeadWentOutEndsWithPsErrorEvent) {
    PushOptions o;
    o.decode_args = {"--token-delay-ms", "1"};
    PdCluster pd = start_push(o);
    const json body = completion_body(words(20), 5, true);
    // P fails slowly: D's (pdsim's) answer head may go out first; either way the client is
    // told of P's failure and never gets tokens.
    sim_fault(*pd.prefill[0], {{"status", 503}, {"delay_ms", 300}});
    auto r = send_generation(*pd.router, body);
    if (r.status == 200) {
        EXPECT_EQ(error_events(r.body).size(), 1u) << r.body;
        EXPECT_EQ(r.body.find("[DONE]"), std::string::npos);
    } else {
        EXPECT_EQ(r.status, 502) << r.describe();
    }
    EXPECT_NE(r.body.find("prefill instance"), std::string::npos) << r.body;
}

TEST_F(PushFlowTest, DecodeRefusalAbortsThePrefillThroughTheAgent) {
    PushOptions o;
    o.agent = true;
    PdCluster pd = start_push(o);
    const json body = completion_body(words(30), 5, false);
    // D refuses at once; P's prefill ends and holds its blocks for a Register that never
    // comes: the router's Abort frees them in one round trip, not one lease.
    sim_fault(*pd.decode[0], {{"status", 503}, {"body", "{\"error\":\"full\"}"}});
    sim_fault(*pd.prefill[0], {{"kv_write_delay_ms", 0}});
    auto r = send_generation(*pd.router, body);
    EXPECT_EQ(r.status, 503) << r.describe();
    EXPECT_TRUE(blocks_freed(pd)) << "held " << held(pd);
    auto m = metric(metrics_text(*pd.router), "pdrouter_transfer_notes_sent_total",
                    {{"kind", "abort"}, {"result", "ok"}});
    EXPECT_GE(m.value_or(0), 1) << metrics_text(*pd.router);
    // A request that lands: P's copy of Done reaches the router.
    r = send_generation(*pd.router, body);
    EXPECT_TRUE(answer_ok(r, body)) << r.describe();
    EXPECT_TRUE(wait_until(
        [&] {
            return metric(metrics_text(*pd.router), "pdrouter_transfer_notes_received_total",
                          {{"kind", "done"}, {"outcome", "matched"}})
                       .value_or(0) >= 1;
        },
        Ms{2000}));
}

TEST_F(PushFlowTest, ClientLeavingFreesThePrefillsBlocksAtOnce) {
    PushOptions o;
    o.agent = true;
    PdCluster pd = start_push(o);
    const json body = completion_body(words(30), 5, false);
    // P finishes, its write waits: the client gives up meanwhile.
    sim_fault(*pd.prefill[0], {{"kv_write_delay_ms", 5000}});
    auto r = send_generation(*pd.router, body, {}, Ms{700});
    EXPECT_EQ(r.status, 0);  // our timeout: the connection was closed by the client side
    EXPECT_TRUE(blocks_freed(pd, Ms{1500})) << "held " << held(pd);
    // D keeps the blocks of a push it gave up on out of its pool until P says nothing can land
    // (pdsim: at most 5 s).
    EXPECT_TRUE(
        wait_until([&] { return sum_counter(pd.decode, "kv_blocks_taken") == 0; }, Ms{6000}));
}

// P's write fails and only the router hears of it: with pdsim's kv_failed_to_router_only,
// P's Failed goes to the router's agent (P's copy of the terminal note) and D's is lost, so D
// would wait its whole --kv-wait-timeout-ms (20 s here) for a note that never comes. An error
// within 3 s is therefore the router's doing: its watch of the transfer ends D's leg.
TEST_P(PushTransportTest, PsFailedCopyToTheRouterEndsTheDecodesWaitAtOnce) {
    PushOptions o;
    o.transport = GetParam();
    o.agent = true;
    o.decode_args = {"--kv-wait-timeout-ms", "20000"};
    PdCluster pd = start_push(o);
    const json body = completion_body(words(30), 5, false);
    sim_fault(*pd.prefill[0], {{"kv_failed_to_router_only", true}});
    const auto sent = Clock::now();
    auto r = send_generation(*pd.router, body, {}, Ms{10000});
    const double ms = ms_between(sent, Clock::now());
    EXPECT_EQ(r.status, 502) << r.describe() << pd.cluster->logs();
    EXPECT_NE(r.body.find("KV transfer failed"), std::string::npos) << r.body;
    EXPECT_LT(ms, 3000) << "not ended by the router: D waited for its own bound";
    EXPECT_EQ(sum_counter(pd.prefill, "kv_push_write_failures"), 1);
    EXPECT_EQ(sum_counter(pd.decode, "kv_push_failed_notes"), 0) << "D heard of it itself";
    EXPECT_EQ(metric(metrics_text(*pd.router), "pdrouter_transfer_notes_received_total",
                     {{"kind", "failed"}, {"outcome", "matched"}})
                  .value_or(0),
              1)
        << metrics_text(*pd.router);
    // D's Abort (its leg was closed) is answered with P's Failed: its blocks are back at once.
    EXPECT_TRUE(
        wait_until([&] { return sum_counter(pd.decode, "kv_blocks_taken") == 0; }, Ms{3000}));
    EXPECT_TRUE(blocks_freed(pd));
    r = send_generation(*pd.router, body);
    EXPECT_TRUE(answer_ok(r, body)) << r.describe();
}

// A prefill SIGKILLed while the decode waits for its (delayed) write: the decode's agent
// notices the peer gone (same host: at once; the core's bound is its 3 s peer timeout), so the
// client gets a clear 5xx long before D's 20 s wait, D's blocks return, and the surviving
// pair serves the next request.
TEST_P(PushTransportTest, APrefillKilledMidPushEndsTheRequestWithAClearError) {
    PushOptions o;
    o.transport = GetParam();
    o.agent = true;
    o.prefills = 2;
    o.decode_args = {"--kv-wait-timeout-ms", "20000"};
    PdCluster pd = start_push(o);
    const json body = completion_body(words(30), 5, false);
    for (Server* p : pd.prefill) {
        sim_fault(*p, {{"kv_write_delay_ms", 60000}});
    }
    auto pending = std::async(std::launch::async,
                              [&] { return send_generation(*pd.router, body, {}, Ms{15000}); });
    ASSERT_TRUE(wait_until([&] { return sum_counter(pd.prefill, "kv_registers") == 1; }, Ms{5000}))
        << pd.cluster->logs();
    Server* victim =
        counter(sim_state(*pd.prefill[0]), "kv_registers") == 1 ? pd.prefill[0] : pd.prefill[1];
    Server* survivor = victim == pd.prefill[0] ? pd.prefill[1] : pd.prefill[0];
    sim_fault(*survivor, {{"count", 0}});
    const auto killed = Clock::now();
    victim->proc.kill_now();
    auto r = pending.get();
    const double ms = ms_between(killed, Clock::now());
    EXPECT_GE(r.status, 500) << r.describe();
    const json err = json::parse(r.body, nullptr, false);
    EXPECT_TRUE(err.is_object() && err.contains("error")) << r.body;
    EXPECT_NE(r.body.find("gone"), std::string::npos) << r.body;
    EXPECT_LT(ms, 3000 + 1000) << "within the core's peer-gone bound (3 s) plus slack";
    EXPECT_TRUE(
        wait_until([&] { return sum_counter(pd.decode, "kv_blocks_taken") == 0; }, Ms{3000}));
    EXPECT_EQ(http_get(pd.router->port, "/health").status, 200);
    r = send_generation(*pd.router, body);
    EXPECT_TRUE(answer_ok(r, body)) << r.describe() << pd.cluster->logs();
    EXPECT_TRUE(blocks_freed(pd));
}

// The decode SIGKILLed while the prefill's write waits: the router's decode leg fails, the
// client gets a 502, P's blocks are freed (the router's Abort, or the write failing on the
// gone peer), and the surviving decode serves the next request.
TEST_P(PushTransportTest, ADecodeKilledMidPushEndsTheRequestAndFreesThePrefill) {
    PushOptions o;
    o.transport = GetParam();
    o.agent = true;
    o.decodes = 2;
    PdCluster pd = start_push(o);
    const json body = completion_body(words(30), 5, false);
    sim_fault(*pd.prefill[0], {{"kv_write_delay_ms", 60000}});
    auto pending = std::async(std::launch::async,
                              [&] { return send_generation(*pd.router, body, {}, Ms{15000}); });
    ASSERT_TRUE(wait_until([&] { return counter(sim_state(*pd.prefill[0]), "kv_registers") == 1; },
                           Ms{5000}))
        << pd.cluster->logs();
    Server* victim =
        sum_counter({pd.decode[0]}, "kv_blocks_taken") > 0 ? pd.decode[0] : pd.decode[1];
    const auto killed = Clock::now();
    victim->proc.kill_now();
    auto r = pending.get();
    EXPECT_EQ(r.status, 502) << r.describe();
    EXPECT_NE(r.body.find("decode instance"), std::string::npos) << r.body;
    EXPECT_LT(ms_between(killed, Clock::now()), 3000 + 1000);
    EXPECT_TRUE(blocks_freed(pd)) << "held " << held(pd);
    r = send_generation(*pd.router, body);
    EXPECT_TRUE(answer_ok(r, body)) << r.describe() << pd.cluster->logs();
    EXPECT_EQ(http_get(pd.router->port, "/health").status, 200);
}

// Under load (8 clients, bounded in count and time), a decode SIGKILLed and a prefill stopped
// (SIGSTOP) for 4 s and resumed: every request ends, with the exact text or an OpenAI
// error (a stream: one error event), none hangs; the router stays up and serves again on what
// is left; every prefill's held blocks, the stopped one's included, come back to 0, and so do
// the survivors' taken blocks and the router's in-flight gauges.
TEST_F(PushFlowTest, UnderLoadAKilledDecodeAndAStoppedPrefillEndEveryRequestAndFreeTheBlocks) {
    PushOptions o;
    o.agent = true;
    o.prefills = 2;
    o.decodes = 2;
    o.prefill_args = {"--prefill-delay-ms", "20"};
    o.decode_args = {"--token-delay-ms", "10", "--kv-wait-timeout-ms", "10000"};
    PdCluster pd = start_push(o);
    constexpr int kClients = 8, kPerClient = 12;
    struct Sent {
        json body;
        HttpResponse answer;
    };
    std::vector<std::vector<Sent>> sent(kClients);
    std::atomic<int> done{0};
    const auto stop_by = Clock::now() + std::chrono::seconds(60);
    std::vector<std::thread> clients;
    for (int c = 0; c < kClients; ++c) {
        clients.emplace_back([&, c] {
            for (int i = 0; i < kPerClient && Clock::now() < stop_by; ++i) {
                Sent s;
                s.body = completion_body(words(20 + c + i), 4 + i % 4, i % 2 == 1);
                s.answer = send_generation(
                    *pd.router, s.body,
                    {{"X-Request-Id", "load-" + std::to_string(c) + "-" + std::to_string(i)}},
                    Ms{30000});
                sent[c].push_back(std::move(s));
                ++done;
            }
        });
    }
    EXPECT_TRUE(wait_until([&] { return done >= 16; }, Ms{20000}));
    pd.decode[1]->proc.kill_now();
    const int at_kill = done;
    EXPECT_TRUE(wait_until([&] { return done >= at_kill + 16; }, Ms{20000}));
    pd.prefill[1]->proc.signal(SIGSTOP);
    // The fault's length, not a wait for a condition: stopped past the transfer agents' 3 s
    // peer timeout, so every side declares the others gone (and P, resumed, does too).
    std::this_thread::sleep_for(std::chrono::seconds(4));
    pd.prefill[1]->proc.signal(SIGCONT);
    for (auto& t : clients) {
        t.join();
    }
    int ok = 0, errors = 0;
    for (int c = 0; c < kClients; ++c) {
        for (std::size_t i = 0; i < sent[c].size(); ++i) {
            const HttpResponse& r = sent[c][i].answer;
            const std::string where = "client " + std::to_string(c) + " request " +
                                      std::to_string(i) + ": " + r.describe();
            if (answer_ok(r, sent[c][i].body)) {
                ++ok;
                continue;
            }
            ++errors;
            ASSERT_NE(r.status, 0) << "no answer (a hang) " << where;
            if (r.status == 200) {  // a stream whose head went out: one error event, no [DONE]
                EXPECT_EQ(error_events(r.body).size(), 1u) << where;
                EXPECT_EQ(r.body.find("[DONE]"), std::string::npos) << where;
            } else {
                EXPECT_GE(r.status, 500) << where;
                EXPECT_TRUE(is_openai_error(r.body)) << where;
            }
        }
    }
    EXPECT_EQ(ok + errors, kClients * kPerClient) << "the clients ran out of time";
    EXPECT_GT(ok, kClients * kPerClient / 2) << ok << " ok, " << errors << " errors";
    std::cout << "[push load] " << ok << " ok, " << errors << " ended with an error\n";
    EXPECT_EQ(http_get(pd.router->port, "/health").status, 200);
    for (int i = 0; i < 4; ++i) {  // the survivors serve, the resumed prefill included
        const json body = completion_body(words(40 + i), 5, i % 2 == 1);
        auto r = send_generation(*pd.router, body, {}, Ms{30000});
        EXPECT_TRUE(answer_ok(r, body)) << r.describe();
    }
    EXPECT_TRUE(blocks_freed(pd, Ms{10000})) << "held " << held(pd);
    EXPECT_TRUE(
        wait_until([&] { return sum_counter(pd.decode, "kv_blocks_taken") == 0; }, Ms{10000}))
        << sum_counter(pd.decode, "kv_blocks_taken");
    EXPECT_TRUE(wait_until(
        [&] {
            const std::string m = metrics_text(*pd.router);
            return metric(m, "pdrouter_requests_in_flight").value_or(-1) == 0 &&
                   metric(m, "pdrouter_instance_in_flight").value_or(-1) == 0;
        },
        Ms{5000}))
        << metrics_text(*pd.router);
    if (HasFailure()) {
        std::cerr << pd.cluster->logs();
    }
}

TEST_F(PushFlowTest, APrefillNotInPushModeIsAConfigurationError) {
    PdCluster pd = start_push({});
    const json body = completion_body(words(20), 5, false);
    sim_fault(*pd.prefill[0], {{"kv_answer_pull", true}});
    auto r = send_generation(*pd.router, body);
    EXPECT_EQ(r.status, 502) << r.describe();
    EXPECT_EQ(r.json()["error"]["code"], "kv_mode_mismatch") << r.body;
    EXPECT_NE(r.body.find(pd.prefill[0]->address()), std::string::npos) << r.body;
    EXPECT_EQ(metric(metrics_text(*pd.router), "pdrouter_kv_mode_mismatch_total").value_or(0), 1);
    // D's leg was cancelled. A P answering as pull never sends D a Failed for the transfer, so
    // D keeps those blocks out of its pool for its bound (pdsim: at most 5 s) before reuse.
    EXPECT_TRUE(
        wait_until([&] { return sum_counter(pd.decode, "kv_blocks_taken") == 0; }, Ms{10000}));
    EXPECT_NE(pd.router->proc.log().find("transfer_mode"), std::string::npos);
}

TEST_F(PushFlowTest, ARetryGoesOutUnderANewTransferId) {
    DeadPort dead;
    PushOptions o;
    o.extra_prefills = {dead.address()};
    PdCluster pd = start_push(o);
    const json body = completion_body(words(20), 5, false);
    auto r = send_generation(*pd.router, body, {{"X-Request-Id", "retry-1"}});
    EXPECT_TRUE(answer_ok(r, body)) << r.describe() << pd.cluster->logs();
    // The dead P was tried first (round robin), D's leg of that dispatch was cancelled, and
    // the pair went out again under another transfer id.
    std::set<std::string> ids;
    for (const auto& e : requests_with_id(*pd.decode[0], "retry-1")) {
        ids.insert(transfer_id_of(e));
    }
    const auto p_reqs = requests_with_id(*pd.prefill[0], "retry-1");
    ASSERT_EQ(p_reqs.size(), 1u);
    EXPECT_TRUE(ids.count(transfer_id_of(p_reqs[0])) == 1);
    EXPECT_EQ(ids.size(), requests_with_id(*pd.decode[0], "retry-1").size());
    EXPECT_TRUE(blocks_freed(pd));
}

TEST_F(PushFlowTest, MissingEngineIdsAreRefusedAtStartAndAtInstancesAdd) {
    Cluster& c = new_cluster();
    Server& p = c.start_pdsim("prefill", sim_kv(kTcp, "push"));
    Server& d = c.start_pdsim("decode", sim_kv(kTcp, "push"));
    const RunResult bad = run_to_exit(
        pdrouter_path(), {"--kv-mode", "push", "--prefill", p.address(), "--decode", d.address()},
        Ms{5000});
    EXPECT_TRUE(bad.status.exited);
    EXPECT_EQ(bad.status.code, 2);
    EXPECT_NE(bad.err.find("--prefill-engine-ids"), std::string::npos) << bad.err;
    DeadPort dead;  // the one prefill at start; the live one comes through /instances/add
    Server& r =
        c.start_router({dead.address()}, {d.address()},
                       {"--kv-mode", "push", "--admin-api-key", "k", "--prefill-engine-ids", "dead",
                        "--prefill-side-channel-ports", std::to_string(dead.port())});
    auto add =
        http_post_json(r.port, "/instances/add", {{"type", "prefill"}, {"instance", p.address()}},
                       {{"X-API-Key", "k"}});
    EXPECT_EQ(add.status, 400) << add.describe();
    EXPECT_EQ(add.json()["error"]["param"], "engine_id");
    add = http_post_json(r.port, "/instances/add",
                         {{"type", "prefill"},
                          {"instance", p.address()},
                          {"engine_id", sim_state(p)["engine_id"]},
                          {"side_channel_port", p.port}},
                         {{"X-API-Key", "k"}});
    EXPECT_EQ(add.status, 200) << add.describe();
    auto list = http_get(r.port, "/instances", {{"X-API-Key", "k"}});
    EXPECT_NE(list.body.find("\"engine_id\""), std::string::npos) << list.body;
    const json body = completion_body(words(20), 4, false);
    auto g = send_generation(r, body);
    EXPECT_TRUE(answer_ok(g, body)) << g.describe() << c.logs();
}

// Pull mode with the transfer agent: P's blocks freed at once when D cannot be reached, and
// leases renewed by Heartbeat notes rather than HTTP posts while D queues the request.
TEST_F(PushFlowTest, PullModeAgentAbortsOnAnUnreachableDecodeAndRenewsByHeartbeat) {
    Cluster& c = new_cluster();
    Server& p = c.start_pdsim("prefill", [] {
        auto a = sim_kv(kTcp, "pull");
        a.insert(a.end(), {"--kv-lease-seconds", "1"});
        return a;
    }());
    Server& d = c.start_pdsim("decode", sim_kv(kTcp, "pull"));
    DeadPort dead;
    Server& r = c.start_router({p.address()}, {dead.address(), d.address()},
                               {"--transfer-agent", "--transfer-agent-transports", "tcp",
                                "--kv-lease-timeout-ms", "1000", "--decode-retries", "0"});
    const json body = completion_body(words(30), 4, false);
    // Round robin gives the dead D first: the decode leg fails, the Abort frees P's blocks.
    auto g = send_generation(r, body);
    EXPECT_EQ(g.status, 502) << g.describe();
    EXPECT_TRUE(wait_until([&] { return counter(sim_state(p), "blocks_held") == 0; }, Ms{3000}));
    EXPECT_EQ(counter(sim_state(p), "freed_by_abort"), 1);
    // The next one goes to the live D, which queues it for 3 s (three 1 s leases).
    sim_fault(d, {{"delay_ms", 3000}});
    g = send_generation(r, body, {}, Ms{15000});
    EXPECT_TRUE(answer_ok(g, body)) << g.describe() << c.logs();
    const json st = sim_state(p);
    EXPECT_EQ(counter(st, "freed_by_expiry"), 0);
    EXPECT_GE(counter(st, "kv_heartbeats"), 2);
    EXPECT_EQ(counter(st, "lease_refresh_calls"), 0) << "renewed over HTTP instead";
}

}  // namespace
}  // namespace pdr::test
