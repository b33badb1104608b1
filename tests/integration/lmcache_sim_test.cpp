// pdsim as an LMCache pair (issue 16), without a router: the test plays the router's part
// (PROTOCOLS.md §5) against real pdsim processes — POST /tokenize on P, the prefill leg with a
// disagg_spec naming D's receivers, the "KV ready" notifications on its own ZMQ PULL socket,
// then the decode leg with tokens + [first_tok] — and checks the text against the single-engine
// answer, D's refusal of a prompt whose KV never came, and each LMCache fault.
#include <gtest/gtest.h>

#include <zmq.hpp>

#include <optional>
#include <thread>

#include "tests/support/checks.hpp"
#include "tests/support/fixture.hpp"

namespace pdr::test {
namespace {

using nlohmann::json;
using Message = std::vector<std::string>;  // the frames of one ZMQ message

// The router's side of the "KV ready" channel: a PULL socket bound on a free loopback port.
class KvReadySink {
public:
    KvReadySink() {
        pull_.set(zmq::sockopt::linger, 0);
        pull_.bind("tcp://127.0.0.1:*");
        endpoint_ = pull_.get(zmq::sockopt::last_endpoint);
    }
    const std::string& endpoint() const { return endpoint_; }

    // One message (all its frames), or nullopt when none came within `timeout`.
    std::optional<Message> recv(Ms timeout) {
        zmq::pollitem_t item{pull_.handle(), 0, ZMQ_POLLIN, 0};
        if (zmq::poll(&item, 1, timeout) == 0) {
            return std::nullopt;
        }
        Message m;
        do {
            zmq::message_t frame;
            if (!pull_.recv(frame, zmq::recv_flags::none)) {
                break;
            }
            m.push_back(frame.to_string());
        } while (pull_.get(zmq::sockopt::rcvmore));
        return m;
    }
    // Every message until none came for `quiet`.
    std::vector<Message> drain(Ms quiet = Ms{300}) { return drain_expecting(0, quiet); }
    // The same, but the first `expect` messages are waited for up to `bound` whatever the gaps
    // between them (an 8 MiB message may take longer than `quiet` on a loaded machine).
    std::vector<Message> drain_expecting(std::size_t expect, Ms quiet = Ms{300},
                                         Ms bound = Ms{10000}) {
        std::vector<Message> out;
        const auto until = Clock::now() + bound;
        while (out.size() < expect && Clock::now() < until) {
            if (auto m = recv(Ms{100})) {
                out.push_back(std::move(*m));
            }
        }
        while (auto m = recv(quiet)) {
            out.push_back(std::move(*m));
        }
        return out;
    }

private:
    zmq::context_t ctx_{1};
    zmq::socket_t pull_{ctx_, zmq::socket_type::pull};
    std::string endpoint_;
};

json notif_json(const Message& m) {
    return m.size() == 1 ? json::from_msgpack(m[0], true, false) : json();
}

// How many of `msgs` are exactly one valid notification for `id`.
int notifs_for(const std::vector<Message>& msgs, const std::string& id) {
    int n = 0;
    for (const auto& m : msgs) {
        n += notif_json(m) == json{{"type", "ProxyNotif"}, {"req_id", id}} ? 1 : 0;
    }
    return n;
}

// How the KV moves: pdsim's own TCP stream (--kv-transfer http), or through the transfer core
// over UCX tcp or shared memory.
struct Transport {
    const char* name;
    const char* tls;  // "" = --kv-transfer http
    const char* devices;
    bool pdx() const { return *tls != '\0'; }
};

std::vector<std::string> kv_flags(const Transport& t, std::vector<std::string> a) {
    if (!t.pdx()) {
        a.insert(a.end(), {"--kv-transfer", "http"});
        return a;
    }
    a.insert(a.end(), {"--kv-transfer", "pdx", "--kv-transports", t.tls});
    if (*t.devices) {
        a.insert(a.end(), {"--kv-net-devices", t.devices});
    }
    return a;
}

class LmcacheSimTest : public ClusterTest, public ::testing::WithParamInterface<Transport> {
protected:
    void SetUp() override {
        Cluster& c = new_cluster();
        p_ = &c.start_pdsim("prefill",
                            flags({"--kv-mode", "lmcache", "--tp-size", "2", "--kv-ready-connect",
                                   sink_.endpoint(), "--block-size-tokens", "4"}));
        d_ = &c.start_pdsim("decode", flags({"--kv-mode", "lmcache", "--lmcache-init-ports", "0,0",
                                             "--lmcache-alloc-ports", "0,0"}));
        ASSERT_EQ(d_->lmcache_init_ports.size(), 2u);
        ASSERT_EQ(d_->lmcache_alloc_ports.size(), 2u);
        cluster_ = &c;
    }

    std::vector<std::int64_t> tokenize(const json& body) {
        json t = body.contains("messages") ? json{{"messages", body["messages"]}}
                                           : json{{"prompt", body["prompt"]}};
        auto r = http_post_json(p_->port, "/tokenize", t);
        EXPECT_EQ(r.status, 200) << r.describe();
        auto j = r.json();
        EXPECT_EQ(j["count"], j["tokens"].size());
        EXPECT_EQ(j["max_model_len"], 8192);
        return j["tokens"].get<std::vector<std::int64_t>>();
    }

    json prefill_body(const std::vector<std::int64_t>& ids, const std::string& id,
                      const Server& d) {
        return json{{"model", kModel},
                    {"prompt", ids},
                    {"max_tokens", 1},
                    {"stream", false},
                    {"kv_transfer_params",
                     {{"ret_first_tok", true},
                      {"disagg_spec",
                       {{"req_id", id},
                        {"receiver_host", "127.0.0.1"},
                        {"receiver_init_port", d.lmcache_init_ports},
                        {"receiver_alloc_port", d.lmcache_alloc_ports}}}}}};
    }

    HttpResponse prefill(const std::vector<std::int64_t>& ids, const std::string& id) {
        return http_post_json(p_->port, "/v1/completions", prefill_body(ids, id, *d_),
                              {{"X-Request-Id", id}});
    }

    HttpResponse decode(std::vector<std::int64_t> ids, std::int64_t first, int max_tokens,
                        bool stream, const std::string& id) {
        ids.push_back(first);
        json b{{"model", kModel}, {"prompt", ids}, {"max_tokens", max_tokens}, {"stream", stream}};
        return http_post_json(d_->port, "/v1/completions", b, {{"X-Request-Id", id}});
    }

    // The whole handover for `body` (max_tokens n); returns P's text + D's text.
    std::string handover(const json& body, int n, bool stream, const std::string& id) {
        const auto ids = tokenize(body);
        EXPECT_EQ(ids, prompt_token_ids(body));
        auto pr = prefill(ids, id);
        EXPECT_EQ(pr.status, 200) << pr.describe();
        const json pj = pr.json();
        const std::int64_t first = pj["kv_transfer_params"]["first_tok"].get<std::int64_t>();
        EXPECT_EQ(first, expected_first_token(ids));
        EXPECT_EQ(pj["object"], "text_completion");
        EXPECT_EQ(pj["choices"][0]["text"], token_id_text(first));
        EXPECT_EQ(pj["usage"]["prompt_tokens"], ids.size());
        EXPECT_EQ(pj["usage"]["completion_tokens"], 1);
        EXPECT_EQ(pj["usage"]["total_tokens"], ids.size() + 1);
        // Exactly one notification per prefill rank, then nothing.
        const auto msgs = sink_.drain();
        EXPECT_EQ(msgs.size(), 2u);
        EXPECT_EQ(notifs_for(msgs, id), 2);
        auto dr = decode(ids, first, n - 1, stream, id);
        EXPECT_EQ(dr.status, 200) << dr.describe();
        std::string error;
        const std::string rest = answer_text(dr.body, stream, false, error);
        EXPECT_TRUE(error.empty()) << error;
        return pj["choices"][0]["text"].get<std::string>() + rest;
    }

    json state(const Server& s) { return sim_state(s); }
    static std::vector<std::string> flags(std::vector<std::string> a) {
        return kv_flags(GetParam(), std::move(a));
    }

    KvReadySink sink_;
    Cluster* cluster_ = nullptr;
    Server* p_ = nullptr;
    Server* d_ = nullptr;
};

TEST_P(LmcacheSimTest, CompletionHandoverEqualsSingleEngineAnswer) {
    const json body = completion_body("the river runs past the old stone mill tonight", 12, false);
    EXPECT_EQ(handover(body, 12, false, "lm-cmpl-1"),
              expected_completion_text(body["prompt"].get<std::string>(), 12));
    // The same request straight to one engine (a text prompt: served without KV).
    auto direct = http_post_json(d_->port, "/v1/completions", body);
    ASSERT_EQ(direct.status, 200) << direct.describe();
    EXPECT_EQ(direct.json()["choices"][0]["text"], expected_text(body));
    // Streamed decode leg: the same text.
    EXPECT_EQ(handover(body, 12, true, "lm-cmpl-2"), expected_text(body));

    const json ps = state(*p_);
    EXPECT_EQ(counter(ps, "lmcache_handovers"), 2);
    EXPECT_EQ(counter(ps, "lmcache_kv_sent"), 4);
    EXPECT_EQ(counter(ps, "lmcache_notifs_sent"), 4);
    // P's sends are the transfers: 2 requests x 2 ranks x 9 prompt tokens x 64 bytes.
    EXPECT_EQ(counter(ps, "kv_transfer_bytes"), 2 * 2 * 9 * 64);
    EXPECT_GT(counter(ps, "kv_transfer_us"), 0);
    EXPECT_EQ(counter(ps, "protocol_violations"), 0) << ps["violations"];
    EXPECT_EQ(ps["kv_mode"], "lmcache");
    const json ds = state(*d_);
    EXPECT_EQ(counter(ds, "lmcache_kv_received"), 4);
    EXPECT_EQ(counter(ds, "lmcache_kv_claimed"), 2);
    EXPECT_EQ(counter(ds, "lmcache_kv_missing"), 0);
    EXPECT_EQ(counter(ds, "lmcache_kv_copies_held"), 0);
    EXPECT_EQ(counter(ds, "lmcache_handshakes"), 4);
    EXPECT_EQ(counter(ds, "local_prefills"), 1);  // the direct request
    EXPECT_EQ(counter(ds, "protocol_violations"), 0) << ds["violations"];
    EXPECT_EQ(ds["lmcache_alloc_ports"], json(d_->lmcache_alloc_ports));
    // Through the transfer core D checked every byte it received in its own blocks (one block
    // a copy), and gave the blocks back; over pdsim's TCP stream the agent is not involved.
    EXPECT_EQ(ds["kv_transfer"], GetParam().pdx() ? "pdx" : "http");
    EXPECT_EQ(counter(ds, "kv_bytes_verified"), GetParam().pdx() ? 2 * 2 * 9 * 64 : 0);
    EXPECT_EQ(counter(ds, "kv_blocks_verified"), GetParam().pdx() ? 4 : 0);
    EXPECT_EQ(counter(ds, "kv_verify_failures"), 0);
    EXPECT_EQ(counter(ds, "kv_blocks_taken"), 0) << ds;
}

TEST_P(LmcacheSimTest, ChatHandoverEqualsSingleEngineAnswer) {
    const json body = chat_body("tell me about copper and silver", 9, false);
    EXPECT_EQ(handover(body, 9, false, "lm-chat-1"), expected_chat_text(body["messages"], 9));
    auto direct = http_post_json(d_->port, "/v1/chat/completions", body);
    ASSERT_EQ(direct.status, 200) << direct.describe();
    EXPECT_EQ(direct.json()["choices"][0]["message"]["content"], expected_text(body));
}

TEST_P(LmcacheSimTest, DecodeWithoutKvIsRefused) {
    const auto ids = prompt_token_ids(completion_body("never prefilled prompt", 4, false));
    auto r = decode(ids, expected_first_token(ids), 3, false, "lm-nokv");
    EXPECT_EQ(r.status, 500) << r.describe();
    std::string message;
    ASSERT_TRUE(is_openai_error(r.body, &message)) << r.body;
    EXPECT_EQ(message, "lmcache: KV for this prompt not received on rank 0");
    // A streamed request is refused the same way, before any event.
    r = decode(ids, expected_first_token(ids), 3, true, "lm-nokv-s");
    EXPECT_EQ(r.status, 500) << r.describe();
    const json ds = state(*d_);
    EXPECT_EQ(counter(ds, "lmcache_kv_missing"), 2);
    EXPECT_EQ(counter(ds, "completed"), 0);
    EXPECT_EQ(counter(ds, "local_prefills"), 0);
}

TEST_P(LmcacheSimTest, KvIsClaimedOnce) {
    const json body = completion_body("claimed once only", 5, false);
    EXPECT_EQ(handover(body, 5, false, "lm-once"), expected_text(body));
    const auto ids = prompt_token_ids(body);
    auto again = decode(ids, expected_first_token(ids), 4, false, "lm-once-again");
    EXPECT_EQ(again.status, 500) << again.describe();
}

TEST_P(LmcacheSimTest, NoDisaggSpecMovesNothing) {
    const auto ids = prompt_token_ids(completion_body("just one token please", 1, false));
    json b = prefill_body(ids, "lm-nospec", *d_);
    b["kv_transfer_params"].erase("disagg_spec");
    auto r = http_post_json(p_->port, "/v1/completions", b, {{"X-Request-Id", "lm-nospec"}});
    ASSERT_EQ(r.status, 200) << r.describe();
    EXPECT_EQ(r.json()["kv_transfer_params"]["first_tok"], expected_first_token(ids));
    EXPECT_TRUE(sink_.drain(Ms{200}).empty());
    EXPECT_EQ(counter(state(*d_), "lmcache_kv_received"), 0);
    EXPECT_EQ(counter(state(*p_), "lmcache_handovers"), 0);
}

TEST_P(LmcacheSimTest, MalformedSpecOrUnreachableReceiverFails) {
    const auto ids = prompt_token_ids(completion_body("bad spec", 1, false));
    json b = prefill_body(ids, "lm-bad", *d_);
    b["kv_transfer_params"]["disagg_spec"]["receiver_alloc_port"] = json::array({1});
    auto r = http_post_json(p_->port, "/v1/completions", b, {{"X-Request-Id", "lm-bad"}});
    EXPECT_EQ(r.status, 400) << r.describe();
    EXPECT_TRUE(is_openai_error(r.body)) << r.body;

    DeadPort dead;
    b = prefill_body(ids, "lm-dead", *d_);
    b["kv_transfer_params"]["disagg_spec"]["receiver_init_port"][1] = dead.port();
    r = http_post_json(p_->port, "/v1/completions", b, {{"X-Request-Id", "lm-dead"}});
    EXPECT_EQ(r.status, 500) << r.describe();
    std::string message;
    ASSERT_TRUE(is_openai_error(r.body, &message)) << r.body;
    EXPECT_NE(message.find("lmcache: KV receiver rank 1"), std::string::npos) << message;
    EXPECT_TRUE(sink_.drain(Ms{200}).empty());  // no KV, no notification
    EXPECT_EQ(counter(state(*p_), "lmcache_kv_send_failures"), 1);

    // Init and alloc ports swapped between ranks: the handshake names the mismatch.
    b = prefill_body(ids, "lm-swap", *d_);
    auto& spec = b["kv_transfer_params"]["disagg_spec"];
    spec["receiver_init_port"] =
        json::array({d_->lmcache_init_ports[1], d_->lmcache_init_ports[0]});
    r = http_post_json(p_->port, "/v1/completions", b, {{"X-Request-Id", "lm-swap"}});
    EXPECT_EQ(r.status, 500) << r.describe();
    EXPECT_NE(r.body.find("is rank"), std::string::npos) << r.body;
}

// Each fault, one request each.
TEST_P(LmcacheSimTest, KvFaultsMakeDecodeFail) {
    const auto ids = prompt_token_ids(completion_body("skip the second rank", 4, false));
    const std::int64_t first = expected_first_token(ids);
    sim_fault(*p_, {{"lmcache_skip_kv_ranks", {1}}});
    auto r = prefill(ids, "lm-skip");
    ASSERT_EQ(r.status, 200) << r.describe();
    EXPECT_EQ(notifs_for(sink_.drain(), "lm-skip"), 2);  // P notifies as if all went well
    auto dr = decode(ids, first, 3, false, "lm-skip");
    EXPECT_EQ(dr.status, 500);
    EXPECT_NE(dr.body.find("not received on rank 1"), std::string::npos) << dr.body;

    const auto ids2 = prompt_token_ids(completion_body("corrupt the first rank", 4, false));
    sim_fault(*p_, {{"lmcache_corrupt_kv_ranks", {0}}});
    r = prefill(ids2, "lm-corrupt");
    ASSERT_EQ(r.status, 200) << r.describe();
    EXPECT_EQ(notifs_for(sink_.drain(), "lm-corrupt"), 2);
    dr = decode(ids2, expected_first_token(ids2), 3, false, "lm-corrupt");
    EXPECT_EQ(dr.status, 500);
    EXPECT_NE(dr.body.find("rank 0 failed verification"), std::string::npos) << dr.body;
    const json ds = state(*d_);
    EXPECT_EQ(counter(ds, "lmcache_kv_corrupt"), 1);
    EXPECT_EQ(counter(ds, "kv_verify_failures"), GetParam().pdx() ? 1 : 0);
    EXPECT_EQ(counter(ds, "lmcache_kv_missing"), 2);
    EXPECT_EQ(counter(state(*p_), "lmcache_kv_skipped"), 1);
}

TEST_P(LmcacheSimTest, NotificationFaults) {
    const auto ids = prompt_token_ids(completion_body("notification faults", 4, false));

    sim_fault(*p_, {{"lmcache_drop_notif_ranks", {1}}});
    ASSERT_EQ(prefill(ids, "lm-drop").status, 200);
    auto msgs = sink_.drain();
    EXPECT_EQ(msgs.size(), 1u);
    EXPECT_EQ(notifs_for(msgs, "lm-drop"), 1);

    sim_fault(*p_, {{"lmcache_notif_duplicate", true}});
    ASSERT_EQ(prefill(ids, "lm-dup").status, 200);
    EXPECT_EQ(notifs_for(sink_.drain_expecting(4), "lm-dup"), 4);

    sim_fault(*p_, {{"lmcache_notif_garbage", true}});
    ASSERT_EQ(prefill(ids, "lm-garbage").status, 200);
    msgs = sink_.drain_expecting(8);
    ASSERT_EQ(msgs.size(), 8u);  // six malformed messages, then the two notifications
    EXPECT_TRUE(notif_json(msgs[0]).is_discarded());         // not msgpack
    EXPECT_TRUE(notif_json(msgs[1]).is_array());             // not a map
    EXPECT_FALSE(notif_json(msgs[2]).contains("req_id"));    // no req_id
    EXPECT_TRUE(notif_json(msgs[3])["req_id"].is_number());  // req_id not a string
    EXPECT_EQ(msgs[4].size(), 2u);                           // multipart
    EXPECT_GT(msgs[5].at(0).size(), std::size_t{8} << 20);   // huge
    EXPECT_EQ(notifs_for(msgs, "lm-garbage"), 2);
    EXPECT_EQ(counter(state(*p_), "lmcache_garbage_sent"), 6);

    sim_fault(*p_, {{"lmcache_fail_after_notif", true}});
    auto r = prefill(ids, "lm-fail");
    EXPECT_EQ(r.status, 500);
    EXPECT_TRUE(is_openai_error(r.body)) << r.body;
    EXPECT_EQ(notifs_for(sink_.drain(), "lm-fail"), 2);

    sim_fault(*p_, {{"lmcache_notif_early", true}});
    ASSERT_EQ(prefill(ids, "lm-early").status, 200);
    EXPECT_EQ(notifs_for(sink_.drain(), "lm-early"), 2);

    // Delayed: the answer comes first, the notifications later.
    sim_fault(*p_, {{"lmcache_notif_delay_ms", 400}});
    const auto sent = Clock::now();
    r = prefill(ids, "lm-late");
    ASSERT_EQ(r.status, 200);
    EXPECT_LT(ms_between(sent, Clock::now()), 350.0);
    EXPECT_FALSE(sink_.recv(Ms{50}).has_value());
    msgs = sink_.drain(Ms{1000});
    EXPECT_EQ(notifs_for(msgs, "lm-late"), 2);
    EXPECT_GE(ms_between(sent, Clock::now()), 400.0);
    // Every one of those KV copies is still claimable by its decode (six prefills of one prompt).
    for (int i = 0; i < 6; ++i) {
        auto dr = decode(ids, expected_first_token(ids), 3, false, "lm-claim");
        EXPECT_EQ(dr.status, 200) << i << ": " << dr.describe();
    }
}

TEST_P(LmcacheSimTest, StatusAndCloseFaultsStillApply) {
    const auto ids = prompt_token_ids(completion_body("status fault", 4, false));
    sim_fault(*p_, {{"status", 503}});
    auto r = prefill(ids, "lm-503");
    EXPECT_EQ(r.status, 503);
    sim_fault(*p_, {{"close_before_response", true}});
    r = prefill(ids, "lm-close");
    EXPECT_EQ(r.status, 0);
    EXPECT_TRUE(sink_.drain(Ms{200}).empty());
    EXPECT_EQ(counter(state(*d_), "lmcache_kv_received"), 0);
}

// A decode with a short TTL drops KV nobody claimed; large KV (4 MiB per rank) moves intact.
TEST_P(LmcacheSimTest, UnclaimedKvExpiresAndLargeKvMoves) {
    Cluster& c = *cluster_;
    Server& p = c.start_pdsim("prefill",
                              flags({"--kv-mode", "lmcache", "--tp-size", "2", "--kv-ready-connect",
                                     sink_.endpoint(), "--kv-bytes-per-token", "65536"}));
    Server& d = c.start_pdsim("decode", flags({"--kv-mode", "lmcache", "--tp-size", "2",
                                               "--lmcache-kv-ttl-seconds", "1"}));
    ASSERT_EQ(d.lmcache_alloc_ports.size(), 2u);
    std::string prompt;
    for (int i = 0; i < 64; ++i) {
        prompt += "word" + std::to_string(i) + " ";
    }
    const auto ids = prompt_token_ids(completion_body(prompt, 3, false));
    auto r = http_post_json(p.port, "/v1/completions", prefill_body(ids, "lm-big", d),
                            {{"X-Request-Id", "lm-big"}});
    ASSERT_EQ(r.status, 200) << r.describe();
    std::vector<Message> msgs;
    for (int i = 0; i < 2; ++i) {
        if (auto m = sink_.recv(Ms{2000})) {
            msgs.push_back(std::move(*m));
        }
    }
    EXPECT_EQ(notifs_for(msgs, "lm-big"), 2);
    json ds = sim_state(d);  // well within the TTL (the KV arrived before P answered)
    EXPECT_EQ(counter(ds, "lmcache_kv_received"), 2);
    EXPECT_EQ(counter(ds, "lmcache_kv_corrupt"), 0);
    EXPECT_EQ(counter(ds, "lmcache_kv_bytes_held"), 2 * 64 * 65536);
    EXPECT_EQ(counter(ds, "kv_bytes_verified"), GetParam().pdx() ? 2 * 64 * 65536 : 0);
    EXPECT_TRUE(
        wait_until([&] { return counter(sim_state(d), "lmcache_kv_expired") == 2; }, Ms{5000}));
    ds = sim_state(d);
    EXPECT_EQ(counter(ds, "lmcache_kv_bytes_held"), 0);
    std::vector<std::int64_t> with_first = ids;
    with_first.push_back(expected_first_token(ids));
    json b{{"model", kModel}, {"prompt", with_first}, {"max_tokens", 2}};
    auto dr = http_post_json(d.port, "/v1/completions", b);
    EXPECT_EQ(dr.status, 500) << dr.describe();
}

TEST_P(LmcacheSimTest, PullModeIsTheDefault) {
    Server& plain = cluster_->start_pdsim("decode");
    const json s = sim_state(plain);
    EXPECT_EQ(s["kv_mode"], "pull");
    // Token-id prompts are served in pull mode too, without any KV.
    const json body = completion_body("pull mode prompt", 6, false);
    json b = body;
    b["prompt"] = prompt_token_ids(body);
    auto r = http_post_json(plain.port, "/v1/completions", b);
    ASSERT_EQ(r.status, 200) << r.describe();
    EXPECT_EQ(r.json()["choices"][0]["text"], expected_text(body));
}

const Transport kTransports[] = {{"http", "", ""},
#ifdef PDR_TEST_HAVE_UCX
                                 {"pdx_tcp", "tcp", "lo"},
                                 {"pdx_shm", "posix,self", ""}
#endif
};

INSTANTIATE_TEST_SUITE_P(Kv, LmcacheSimTest, ::testing::ValuesIn(kTransports),
                         [](const auto& p) { return std::string(p.param.name); });

}  // namespace
}  // namespace pdr::test
