// pdsim moving real KV bytes through the transfer core (issue 17 §1, §3 engine side), without a
// router: the test plays the router's part (docs/protocols.md, "Push mode" and "pdx engines")
// against two real pdsim processes over UCX tcp and over shared memory, and a pdx::Agent of its
// own plays the router's agent (Abort, Heartbeat, the copies of a push's terminal note).
#include <gtest/gtest.h>

#include <boost/beast/core/detail/base64.hpp>

#include <future>
#include <thread>

#include "pdx/agent.hpp"
#include "tests/support/fixture.hpp"

namespace pdr::test {
namespace {

using nlohmann::json;

struct Transport {
    const char* name;
    const char* tls;
    const char* devices;  // "" = none given
};

std::vector<std::string> kv_flags(const Transport& t, std::vector<std::string> extra = {}) {
    std::vector<std::string> a{"--kv-transfer", "pdx", "--kv-transports", t.tls};
    if (*t.devices) {
        a.insert(a.end(), {"--kv-net-devices", t.devices});
    }
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
}

std::string words(int n) {
    std::string s;
    for (int i = 0; i < n; ++i) {
        s += (i ? " w" : "w") + std::to_string(i);
    }
    return s;
}

std::uint64_t pdx_id(const std::string& s) {
    std::uint64_t h = 0xcbf29ce484222325ULL;
    for (unsigned char c : s) {
        h = (h ^ c) * 0x100000001b3ULL;
    }
    return h == 0 ? 1 : h;
}

class PdxSimTest : public ClusterTest, public ::testing::WithParamInterface<Transport> {
protected:
    void start(const std::string& mode, std::vector<std::string> p_extra = {},
               std::vector<std::string> d_extra = {}) {
        Cluster& c = new_cluster();
        std::vector<std::string> pa = kv_flags(GetParam(), {"--kv-mode", mode});
        pa.insert(pa.end(), p_extra.begin(), p_extra.end());
        std::vector<std::string> da = kv_flags(GetParam(), {"--kv-mode", mode});
        da.insert(da.end(), d_extra.begin(), d_extra.end());
        p_ = &c.start_pdsim("prefill", pa);
        d_ = &c.start_pdsim("decode", da);
        cluster_ = &c;
    }
    std::string engine_id() const { return "pdsim-prefill-" + std::to_string(p_->port); }

    HttpResponse prefill(const json& body, const std::string& id, json params = json::object()) {
        json b = body;
        b["stream"] = false;
        b["max_tokens"] = 1;
        params["do_remote_decode"] = true;
        params["do_remote_prefill"] = false;
        b["kv_transfer_params"] = params;
        return http_post_json(p_->port, "/v1/completions", b, {{"X-Request-Id", id}});
    }
    HttpResponse decode(const json& body, const std::string& id, const json& params,
                        Ms timeout = Ms{20000}) {
        json b = body;
        b["kv_transfer_params"] = params;
        return http_post_json(d_->port, "/v1/completions", b, {{"X-Request-Id", id}}, timeout);
    }
    json push_params(const std::string& id, const std::string& xfer) const {
        return json{{"do_remote_decode", false},
                    {"do_remote_prefill", true},
                    {"remote_engine_id", engine_id()},
                    {"remote_host", "127.0.0.1"},
                    {"remote_port", p_->port},
                    {"tp_size", 1},
                    {"pp_size", 1},
                    {"remote_request_id", id},
                    {"transfer_id", xfer}};
    }
    // The whole pull handover; returns D's answer.
    HttpResponse pull(const json& body, const std::string& id) {
        auto pr = prefill(body, id);
        EXPECT_EQ(pr.status, 200) << pr.describe();
        json params = pr.json()["kv_transfer_params"];
        EXPECT_EQ(params["transfer_mode"], "pull");
        return decode(body, id, params);
    }
    long long p_counter(const std::string& n) { return counter(sim_state(*p_), n); }
    long long d_counter(const std::string& n) { return counter(sim_state(*d_), n); }
    bool p_blocks_freed(Ms bound = Ms{1000}) {
        return wait_until([&] { return p_counter("blocks_held") == 0; }, bound);
    }

    Cluster* cluster_ = nullptr;
    Server* p_ = nullptr;
    Server* d_ = nullptr;
};

// The test's stand-in for the router's agent: a named agent on the same transport.
class RouterAgent {
public:
    explicit RouterAgent(const Transport& t) {
        pdx::Config c;
        c.name = "test-router";
        c.transports = t.tls;
        c.net_devices = t.devices;
        auto a = pdx::Agent::create(c);
        if (!a) {
            throw std::runtime_error(a.message());
        }
        agent_ = std::move(*a);
    }
    std::string descriptor_base64() const {
        namespace b64 = boost::beast::detail::base64;
        const auto d = agent_->descriptor();
        std::string out(b64::encoded_size(d.size()), '\0');
        out.resize(b64::encode(out.data(), d.data(), d.size()));
        return out;
    }
    // Adds the engine behind `port`'s side channel.
    void add(unsigned short port) {
        auto r = http_get(port, "/internal/pdx/descriptor");
        ASSERT_EQ(r.status, 200) << r.describe();
        ASSERT_EQ(r.header("content-type"), "application/octet-stream");
        const auto* p = reinterpret_cast<const std::byte*>(r.body.data());
        auto h = agent_->add_peer(std::span<const std::byte>(p, r.body.size()));
        ASSERT_TRUE(h) << h.message();
        peer_ = *h;
    }
    void note(pdx::NotifyKind kind, std::uint64_t id, const json& payload) {
        pdx::Notification n;
        n.kind = kind;
        n.transfer_id = id;
        n.payload = payload.dump();
        auto r = agent_->notify(peer_, n);
        ASSERT_TRUE(r) << r.message();
    }
    void raw_note(pdx::NotifyKind kind, std::uint64_t id, std::string payload) {
        pdx::Notification n;
        n.kind = kind;
        n.transfer_id = id;
        n.payload = std::move(payload);
        ASSERT_TRUE(agent_->notify(peer_, n));
    }
    // Notes received so far (waits up to `bound` for at least `n`).
    std::vector<pdx::ReceivedNotification> received(std::size_t n, Ms bound) {
        wait_until(
            [&] {
                for (auto& x : agent_->drain_notifications()) {
                    got_.push_back(std::move(x));
                }
                return got_.size() >= n;
            },
            bound);
        return got_;
    }

private:
    std::unique_ptr<pdx::Agent> agent_;
    pdx::PeerHandle peer_ = pdx::kNoPeer;
    std::vector<pdx::ReceivedNotification> got_;
};

TEST_P(PdxSimTest, PullMovesVerifiedBytesAndGivesTheExactText) {
    start("pull");
    for (bool stream : {false, true}) {
        const json body = completion_body(words(40), 7, stream);
        const std::string id = stream ? "pull-stream" : "pull-plain";
        auto r = pull(body, id);
        ASSERT_EQ(r.status, 200) << r.describe();
        if (!stream) {
            EXPECT_EQ(r.json()["choices"][0]["text"], expected_text(body));
        }
    }
    EXPECT_EQ(d_counter("kv_blocks_verified"), 2 * 3);  // 40 tokens: 3 blocks of 16, twice
    EXPECT_EQ(d_counter("kv_bytes_verified"), 2 * 3 * 4096);
    // Pull: D's reads are the transfers (bytes and wall time); P moved nothing itself.
    EXPECT_EQ(d_counter("kv_transfer_bytes"), 2 * 3 * 4096);
    EXPECT_GT(d_counter("kv_transfer_us"), 0);
    EXPECT_EQ(p_counter("kv_transfer_bytes"), 0);
    EXPECT_EQ(d_counter("kv_verify_failures"), 0);
    EXPECT_TRUE(p_blocks_freed());
    EXPECT_EQ(p_counter("freed_by_read"), 2);
    EXPECT_EQ(p_counter("kv_done_notes"), 2);
    EXPECT_EQ(d_counter("kv_blocks_taken"), 0);
    EXPECT_EQ(p_counter("protocol_violations"), 0);
}

TEST_P(PdxSimTest, PullRefusesACorruptBlockAndAFreedOne) {
    start("pull");
    const json body = completion_body(words(40), 4, false);
    sim_fault(*p_, {{"kv_corrupt_block", true}});
    auto r = pull(body, "corrupt");
    EXPECT_EQ(r.status, 500) << r.describe();
    EXPECT_NE(r.body.find("failed verification"), std::string::npos) << r.body;
    EXPECT_EQ(d_counter("kv_verify_failures"), 1);
    // Blocks released before D reads them (scrubbed on free) are refused too.
    auto pr = prefill(body, "freed");
    ASSERT_EQ(pr.status, 200);
    ASSERT_EQ(
        http_post_json(p_->port, "/internal/pdsim/kv_release", {{"request_id", "freed"}}).status,
        200);
    auto dr = decode(body, "freed", pr.json()["kv_transfer_params"]);
    EXPECT_EQ(dr.status, 500) << dr.describe();
    EXPECT_EQ(d_counter("kv_verify_failures"), 2);
    // A handle of another generation of the prefill's agent (a restarted engine) is refused.
    auto sr = prefill(body, "stale");
    ASSERT_EQ(sr.status, 200);
    json stale = sr.json()["kv_transfer_params"];
    stale["pdx_instance"] = "0123456789abcdef";
    auto st = decode(body, "stale", stale);
    EXPECT_EQ(st.status, 500) << st.describe();
    EXPECT_NE(st.body.find("previous generation"), std::string::npos) << st.body;
    EXPECT_EQ(d_counter("kv_read_failures"), 1);
    EXPECT_EQ(d_counter("kv_reads"), 0);
    EXPECT_EQ(d_counter("kv_blocks_taken"), 0);
    const std::string m = http_get(d_->port, "/metrics").body;
    EXPECT_NE(m.find("pdsim_kv_verify_failures_total{model_name=\"pdsim-test-model\"} 2"),
              std::string::npos)
        << m;
    ASSERT_EQ(
        http_post_json(p_->port, "/internal/pdsim/kv_release", {{"request_id", "stale"}}).status,
        200);
    EXPECT_TRUE(p_blocks_freed());
}

TEST_P(PdxSimTest, PullAfterAPrefillRestartUsesTheNewGenerationAndRefusesTheOld) {
    start("pull", {"--engine-id", "p-restart"});
    const json body = completion_body(words(20), 4, false);
    ASSERT_EQ(pull(body, "before").status, 200);  // D now caches P's first generation
    auto pr = prefill(body, "orphan");
    ASSERT_EQ(pr.status, 200);
    const json old_handle = pr.json()["kv_transfer_params"];
    const unsigned short port = p_->port;
    p_->proc.kill_now();
    // The same engine id on the same port: the next generation of the same peer.
    p_ = &cluster_->start_pdsim(
        "prefill", kv_flags(GetParam(), {"--kv-mode", "pull", "--engine-id", "p-restart", "--port",
                                         std::to_string(port)}));
    ASSERT_EQ(p_->port, port);
    auto stale = decode(body, "orphan", old_handle);
    EXPECT_EQ(stale.status, 500) << stale.describe();
    EXPECT_NE(stale.body.find("previous generation"), std::string::npos) << stale.body;
    auto r = pull(body, "after");
    ASSERT_EQ(r.status, 200) << r.describe();
    EXPECT_EQ(r.json()["choices"][0]["text"], expected_text(body));
    EXPECT_EQ(d_counter("kv_reads"), 2);
    EXPECT_EQ(d_counter("kv_read_failures"), 1);
    EXPECT_TRUE(p_blocks_freed());
}

TEST_P(PdxSimTest, PushInBothArrivalOrders) {
    start("push");
    const json body = completion_body(words(40), 6, false);
    // D first: its Register waits on P until the prefill ends.
    {
        auto d = std::async(std::launch::async,
                            [&] { return decode(body, "early", push_params("early", "xfer-1")); });
        ASSERT_TRUE(wait_until([&] { return p_counter("kv_early_registers") == 1; }, Ms{5000}));
        auto pr = prefill(body, "early", {{"transfer_id", "xfer-1"}});
        ASSERT_EQ(pr.status, 200) << pr.describe();
        EXPECT_EQ(pr.json()["kv_transfer_params"]["transfer_mode"], "push");
        EXPECT_EQ(pr.json()["kv_transfer_params"]["transfer_id"], "xfer-1");
        auto r = d.get();
        ASSERT_EQ(r.status, 200) << r.describe();
        EXPECT_EQ(r.json()["choices"][0]["text"], expected_text(body));
    }
    // P first: it holds the blocks until D registers.
    {
        auto pr = prefill(body, "late", {{"transfer_id", "xfer-2"}});
        ASSERT_EQ(pr.status, 200) << pr.describe();
        EXPECT_EQ(p_counter("blocks_held"), 3);
        auto r = decode(body, "late", push_params("late", "xfer-2"));
        ASSERT_EQ(r.status, 200) << r.describe();
        EXPECT_EQ(r.json()["choices"][0]["text"], expected_text(body));
    }
    EXPECT_EQ(p_counter("kv_registers"), 2);
    EXPECT_EQ(p_counter("kv_early_registers"), 1);
    EXPECT_EQ(p_counter("kv_push_writes"), 2);
    // Push: P's writes are the transfers.
    EXPECT_EQ(p_counter("kv_transfer_bytes"), 2 * 3 * 4096);
    EXPECT_GT(p_counter("kv_transfer_us"), 0);
    EXPECT_EQ(d_counter("kv_transfer_bytes"), 0);
    EXPECT_EQ(d_counter("kv_blocks_verified"), 6);
    EXPECT_TRUE(p_blocks_freed());
    EXPECT_EQ(p_counter("freed_by_read"), 2);
    EXPECT_EQ(d_counter("kv_blocks_taken"), 0);
}

TEST_P(PdxSimTest, PushFaultsDelayedWriteDelayedRegisterAndCorruptBlock) {
    start("push");
    const json body = completion_body(words(20), 5, true);
    // P's write delayed: D waits on Done.
    sim_fault(*p_, {{"kv_write_delay_ms", 300}});
    auto d = std::async(std::launch::async,
                        [&] { return decode(body, "w", push_params("w", "xfer-w")); });
    ASSERT_EQ(prefill(body, "w", {{"transfer_id", "xfer-w"}}).status, 200);
    EXPECT_EQ(d.get().status, 200);
    // D's Register delayed: P finished first.
    sim_fault(*d_, {{"kv_register_delay_ms", 300}});
    d = std::async(std::launch::async,
                   [&] { return decode(body, "r", push_params("r", "xfer-r")); });
    ASSERT_EQ(prefill(body, "r", {{"transfer_id", "xfer-r"}}).status, 200);
    EXPECT_EQ(d.get().status, 200);
    // One corrupt byte: D refuses the KV and answers no tokens.
    sim_fault(*p_, {{"kv_corrupt_block", true}});
    ASSERT_EQ(prefill(body, "c", {{"transfer_id", "xfer-c"}}).status, 200);
    auto bad = decode(body, "c", push_params("c", "xfer-c"));
    EXPECT_EQ(bad.status, 500) << bad.describe();
    EXPECT_NE(bad.body.find("failed verification"), std::string::npos) << bad.body;
    EXPECT_EQ(d_counter("kv_verify_failures"), 1);
    // The mismatch fault: a push-mode P answers a pull handle.
    sim_fault(*p_, {{"kv_answer_pull", true}});
    auto pr = prefill(body, "m", {{"transfer_id", "xfer-m"}});
    EXPECT_EQ(pr.json()["kv_transfer_params"]["transfer_mode"], "pull");
    ASSERT_EQ(http_post_json(p_->port, "/internal/pdsim/kv_release", {{"request_id", "m"}}).status,
              200);
    EXPECT_TRUE(p_blocks_freed());
    EXPECT_EQ(d_counter("kv_blocks_taken"), 0);
}

// A decode whose client leaves after P's Done came (the KV landed) gives its blocks back at once:
// an Abort then would find P's entry gone, go unanswered, and leave them quarantined 5 s.
TEST_P(PdxSimTest, PushDecodeWhoseClientLeftAfterTheKvLandedFreesItsBlocksAtOnce) {
    start("push");
    const json body = completion_body(words(20), 3, false);
    ASSERT_EQ(prefill(body, "left", {{"transfer_id", "xfer-left"}}).status, 200);  // P first
    sim_fault(*d_, {{"kv_hold_after_ms", 1500}});
    json b = body;
    b["kv_transfer_params"] = push_params("left", "xfer-left");
    HttpRequest req;
    req.method = "POST";
    req.target = "/v1/completions";
    req.headers = {{"Content-Type", "application/json"}, {"X-Request-Id", "left"}};
    req.body = b.dump();
    Connection c;
    std::string error;
    ASSERT_TRUE(c.connect(d_->port, error)) << error;
    ASSERT_TRUE(c.write_all(serialize(req), error)) << error;
    // P wrote and said Done; D holds (the fault) with the KV in its blocks. The client leaves.
    ASSERT_TRUE(wait_until([&] { return d_counter("kv_fault_holds") == 1; }, Ms{5000}));
    ASSERT_GT(d_counter("kv_blocks_taken"), 0);
    c.close();
    EXPECT_TRUE(wait_until([&] { return d_counter("kv_blocks_taken") == 0; }, Ms{1400}))
        << sim_state(*d_).dump();
    EXPECT_EQ(d_counter("kv_quarantined"), 0);
    EXPECT_EQ(d_counter("kv_aborts_sent"), 0);
    EXPECT_TRUE(p_blocks_freed());
}

TEST_P(PdxSimTest, RouterAgentAbortFreesAtOnceAndGetsPushCopies) {
    start("push");
    RouterAgent router(GetParam());
    router.add(p_->port);
    const json body = completion_body(words(40), 3, false);
    const json ctl{{"pdx_control", router.descriptor_base64()}};
    // Abort of a prefill nobody registered for: its blocks go at once.
    json params = ctl;
    params["transfer_id"] = "xfer-a";
    ASSERT_EQ(prefill(body, "abort-me", params).status, 200);
    EXPECT_EQ(p_counter("blocks_held"), 3);
    router.note(pdx::NotifyKind::Abort, pdx_id("abort-me"),
                {{"request_id", "abort-me"}, {"transfer_id", "xfer-a"}});
    EXPECT_TRUE(p_blocks_freed(Ms{500}));
    EXPECT_EQ(p_counter("freed_by_abort"), 1);
    EXPECT_EQ(p_counter("kv_aborts"), 1);
    // An Abort of an earlier dispatch leaves a retry's blocks (a new transfer id) alone.
    params["transfer_id"] = "xfer-retry";
    ASSERT_EQ(prefill(body, "retried", params).status, 200);
    router.note(pdx::NotifyKind::Abort, pdx_id("retried"),
                {{"request_id", "retried"}, {"transfer_id", "xfer-first"}});
    EXPECT_TRUE(wait_until([&] { return p_counter("kv_aborts") == 2; }, Ms{2000}));
    EXPECT_EQ(p_counter("blocks_held"), 3);
    router.note(pdx::NotifyKind::Abort, pdx_id("retried"),
                {{"request_id", "retried"}, {"transfer_id", "xfer-retry"}});
    EXPECT_TRUE(p_blocks_freed(Ms{500}));
    EXPECT_EQ(p_counter("freed_by_abort"), 2);
    // A D that registers afterwards is told at once (Failed), not left to its timeout.
    auto late = decode(body, "abort-me", push_params("abort-me", "xfer-a"), Ms{5000});
    EXPECT_EQ(late.status, 500) << late.describe();
    EXPECT_NE(late.body.find("aborted"), std::string::npos) << late.body;
    // An Abort after that Register is answered to D as well: D sends one when its client leaves
    // as P's Failed crosses it, and keeps its blocks out of its pool until it is answered
    // (CI once saw D's block held past 3 s this way). D has no wait left: it counts the note.
    const long long unknown = d_counter("kv_notes_unknown");
    router.note(pdx::NotifyKind::Abort, pdx_id("abort-me"),
                {{"request_id", "abort-me"}, {"transfer_id", "xfer-a"}});
    EXPECT_TRUE(wait_until([&] { return d_counter("kv_notes_unknown") == unknown + 1; }, Ms{2000}));
    // A push that lands: the router's agent gets P's copy of Done.
    params["transfer_id"] = "xfer-ok";
    ASSERT_EQ(prefill(body, "ok", params).status, 200);
    ASSERT_EQ(decode(body, "ok", push_params("ok", "xfer-ok")).status, 200);
    auto notes = router.received(1, Ms{2000});
    ASSERT_EQ(notes.size(), 1u);
    EXPECT_EQ(notes[0].notification.kind, pdx::NotifyKind::Done);
    EXPECT_EQ(notes[0].notification.transfer_id, pdx_id("xfer-ok"));
    const json copy = json::parse(notes[0].notification.payload);
    EXPECT_EQ(copy["request_id"], "ok");
    EXPECT_EQ(copy["bytes"], 3 * 4096);
    // Malformed and unknown notes are counted, never obeyed.
    router.raw_note(pdx::NotifyKind::Abort, 42, "{\"request_id\": \"ok\"}");  // id mismatch
    router.raw_note(pdx::NotifyKind::Abort, pdx_id("x"), "not json");
    router.note(pdx::NotifyKind::Done, pdx_id("nobody"), {{"request_id", "nobody"}});
    EXPECT_TRUE(wait_until([&] { return p_counter("kv_notes_malformed") == 2; }, Ms{2000}));
    EXPECT_TRUE(wait_until([&] { return p_counter("kv_notes_unknown") == 1; }, Ms{2000}));
    EXPECT_TRUE(p_blocks_freed());
}

// An Abort mark that a late Register found lives a TTL from that Register, not from the Abort:
// D's own Abort (sent when its client leaves as P's Failed crosses it) still finds the mark and
// is answered, however late in the mark's first TTL the Register came.
TEST_P(PdxSimTest, AnAbortMarkLivesATtlFromALateRegister) {
    start("push", {"--kv-wait-timeout-ms", "4000"});
    RouterAgent router(GetParam());
    router.add(p_->port);
    const json body = completion_body(words(40), 3, false);
    const json abort_note{{"request_id", "late-reg"}, {"transfer_id", "xfer-z"}};
    // P adds the router's agent as a control peer when a prefill names it (else the agent's
    // peer entry for P ends after its peer timeout, before the second Abort).
    ASSERT_EQ(prefill(body, "other",
                      {{"pdx_control", router.descriptor_base64()}, {"transfer_id", "xfer-other"}})
                  .status,
              200);
    // An Abort before the prefill and the Register: P keeps a mark for xfer-z.
    router.note(pdx::NotifyKind::Abort, pdx_id("late-reg"), abort_note);
    ASSERT_TRUE(wait_until([&] { return p_counter("kv_notes_unknown") == 1; }, Ms{2000}));
    std::this_thread::sleep_for(Ms{2000});  // half the mark's TTL
    auto late = decode(body, "late-reg", push_params("late-reg", "xfer-z"), Ms{5000});
    EXPECT_EQ(late.status, 500) << late.describe();  // told at once: aborted
    EXPECT_NE(late.body.find("aborted"), std::string::npos) << late.body;
    // Past the first TTL (4 s from the Abort), well within one from the Register.
    std::this_thread::sleep_for(Ms{2500});
    const long long unknown = d_counter("kv_notes_unknown");
    router.note(pdx::NotifyKind::Abort, pdx_id("late-reg"), abort_note);
    EXPECT_TRUE(wait_until([&] { return d_counter("kv_notes_unknown") == unknown + 1; }, Ms{2000}))
        << "D got no Failed for its Abort: P's mark was gone";
    EXPECT_EQ(p_counter("kv_aborts"), 1);
    EXPECT_EQ(p_counter("kv_notes_unknown"), 1);
}

TEST_P(PdxSimTest, HeartbeatKeepsAOneSecondLeaseAliveForThreeSeconds) {
    start("pull", {"--kv-lease-seconds", "1"});
    RouterAgent router(GetParam());
    router.add(p_->port);
    const json body = completion_body(words(20), 3, false);
    auto pr = prefill(body, "hb", {{"pdx_control", router.descriptor_base64()}});
    ASSERT_EQ(pr.status, 200);
    const auto until = Clock::now() + Ms{3000};
    while (Clock::now() < until) {  // bounded: 3 s of beats, 3 per lease
        router.note(pdx::NotifyKind::Heartbeat, 0, {{"request_ids", json::array({"hb"})}});
        std::this_thread::sleep_for(Ms{300});
    }
    EXPECT_EQ(p_counter("blocks_held"), 2);
    EXPECT_GE(p_counter("kv_heartbeats"), 9);
    auto r = decode(body, "hb", pr.json()["kv_transfer_params"]);
    ASSERT_EQ(r.status, 200) << r.describe();
    EXPECT_EQ(r.json()["choices"][0]["text"], expected_text(body));
    EXPECT_EQ(p_counter("freed_by_expiry"), 0);
    EXPECT_TRUE(p_blocks_freed());
}

TEST_P(PdxSimTest, PrefillKilledDuringAPushEndsTheDecodeWithAnError) {
    start("push");
    const json body = completion_body(words(20), 3, false);
    sim_fault(*p_, {{"kv_write_delay_ms", 60000}});
    ASSERT_EQ(prefill(body, "k", {{"transfer_id", "xfer-k"}}).status, 200);
    auto d = std::async(std::launch::async,
                        [&] { return decode(body, "k", push_params("k", "xfer-k")); });
    ASSERT_TRUE(wait_until([&] { return p_counter("kv_registers") == 1; }, Ms{5000}));
    const auto killed = Clock::now();
    p_->proc.kill_now();
    auto r = d.get();
    const double ms = ms_between(killed, Clock::now());
    EXPECT_EQ(r.status, 500) << r.describe();
    EXPECT_NE(r.body.find("gone"), std::string::npos) << r.body;
    EXPECT_LT(ms, 3000 + 500) << "within the core's peer-gone bound (peer_timeout 3 s)";
    EXPECT_EQ(d_counter("kv_blocks_taken"), 0);
}

TEST_P(PdxSimTest, DecodeCancelledBeforeThePrefillEndsAbortsIt) {
    start("push");
    const json body = completion_body(words(20), 3, false);
    // The client gives up while D waits: D frees its blocks and sends P an Abort, so the
    // prefill that ends afterwards frees its blocks at once.
    auto gone = decode(body, "c", push_params("c", "xfer-c"), Ms{500});
    EXPECT_EQ(gone.status, 0);
    ASSERT_TRUE(wait_until([&] { return d_counter("kv_aborts_sent") == 1; }, Ms{2000}));
    EXPECT_TRUE(wait_until([&] { return d_counter("kv_blocks_taken") == 0; }, Ms{1000}));
    EXPECT_EQ(d_counter("kv_quarantined"), 0);  // P answered the Abort with Failed
    ASSERT_TRUE(wait_until([&] { return p_counter("kv_aborts") == 1; }, Ms{2000}));
    ASSERT_EQ(prefill(body, "c", {{"transfer_id", "xfer-c"}}).status, 200);
    EXPECT_TRUE(p_blocks_freed(Ms{500}));
    EXPECT_EQ(p_counter("freed_by_abort"), 1);
}

TEST_P(PdxSimTest, SixtyFourMebibytesPerRequestInBothModes) {
    const std::vector<std::string> big{"--kv-block-bytes",    "262144", "--kv-blocks", "300",
                                       "--block-size-tokens", "1"};
    start("push", big, big);
    const json body = completion_body(words(256), 4, false);  // 256 tokens: 256 blocks
    auto pr = prefill(body, "big-pull", {{"transfer_id", "unused"}});
    ASSERT_EQ(pr.status, 200) << pr.describe();
    ASSERT_EQ(
        http_post_json(p_->port, "/internal/pdsim/kv_release", {{"request_id", "big-pull"}}).status,
        200);
    auto d = std::async(std::launch::async,
                        [&] { return decode(body, "big", push_params("big", "xfer-big")); });
    ASSERT_EQ(prefill(body, "big", {{"transfer_id", "xfer-big"}}).status, 200);
    auto r = d.get();
    ASSERT_EQ(r.status, 200) << r.describe();
    EXPECT_EQ(r.json()["choices"][0]["text"], expected_text(body));
    EXPECT_GE(d_counter("kv_bytes_verified"), 64LL << 20);
    // A pool too small for the prompt: 503 with a counter, on either side.
    sim_reset(*d_);
    auto p2 = prefill(body, "too-big-1", {{"transfer_id", "x1"}});
    auto p3 = prefill(body, "too-big-2", {{"transfer_id", "x2"}});
    EXPECT_EQ(p2.status, 200);
    EXPECT_EQ(p3.status, 503) << p3.describe();
    EXPECT_NE(p3.body.find("KV pool exhausted"), std::string::npos);
    EXPECT_EQ(p_counter("kv_pool_refusals"), 1);
}

INSTANTIATE_TEST_SUITE_P(Ucx, PdxSimTest,
                         ::testing::Values(Transport{"tcp", "tcp", "lo"},
                                           Transport{"shm", "posix,self", ""}),
                         [](const auto& p) { return std::string(p.param.name); });

}  // namespace
}  // namespace pdr::test
