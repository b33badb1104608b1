// LMCache mode's pure parts: the notification and KV frame codecs, the KV byte pattern, the
// decode's inbox, the prefill parameters and rewrite checks, and the fault fields.
#include "sim/faults.hpp"
#include "sim/kv_handle.hpp"
#include "sim/lmcache_inbox.hpp"
#include "sim/lmcache_wire.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace pdr::sim {
namespace {

using nlohmann::json;

json from_msgpack(const std::string& s) {
    return json::from_msgpack(s, true, false);
}

TEST(LmcacheWire, ProxyNotifIsAMsgpackMap) {
    const json j = from_msgpack(proxy_notif("req-7"));
    EXPECT_EQ(j, (json{{"type", "ProxyNotif"}, {"req_id", "req-7"}}));
}

TEST(LmcacheWire, GarbageKinds) {
    EXPECT_TRUE(from_msgpack(garbage_notif(NotifGarbage::NotMsgpack).at(0)).is_discarded());
    EXPECT_TRUE(from_msgpack(garbage_notif(NotifGarbage::NonMap).at(0)).is_array());
    const json no_id = from_msgpack(garbage_notif(NotifGarbage::NoReqId).at(0));
    EXPECT_TRUE(no_id.is_object() && !no_id.contains("req_id"));
    EXPECT_TRUE(
        from_msgpack(garbage_notif(NotifGarbage::ReqIdNotString).at(0))["req_id"].is_number());
    const auto multi = garbage_notif(NotifGarbage::Multipart);
    ASSERT_EQ(multi.size(), 2u);
    EXPECT_EQ(from_msgpack(multi[0])["req_id"], "garbage-multipart");
    const auto huge = garbage_notif(NotifGarbage::Huge);
    ASSERT_EQ(huge.size(), 1u);
    EXPECT_GT(huge[0].size(), kHugeNotifBytes);
    EXPECT_EQ(from_msgpack(huge[0])["req_id"], "garbage-huge");
}

TEST(LmcacheWire, HelloAndAckRoundTrip) {
    const auto h = encode_hello(Hello{3, HelloStatus::WrongRank});
    auto back = decode_hello(h);
    ASSERT_TRUE(back);
    EXPECT_EQ(back->rank, 3);
    EXPECT_EQ(back->status, HelloStatus::WrongRank);
    const auto a = encode_ack(KvAck{1, KvStatus::Corrupt});
    auto ack = decode_ack(a);
    ASSERT_TRUE(ack);
    EXPECT_EQ(ack->rank, 1);
    EXPECT_EQ(ack->status, KvStatus::Corrupt);
    // A hello is not an ack, and a wrong version is refused.
    EXPECT_FALSE(decode_ack(h));
    auto v2 = a;
    v2[4] = 2;
    EXPECT_FALSE(decode_ack(v2));
    auto bad_status = a;
    bad_status[5] = 9;
    EXPECT_FALSE(decode_ack(bad_status));
}

KvHeader sample_header() {
    KvHeader h;
    h.rank = 1;
    h.key = 0x0123456789abcdefULL;
    h.tokens = 37;
    h.block_tokens = 16;
    h.bytes_per_token = 64;
    h.bytes = 37 * 64;
    h.req_id = "req-abc";
    return h;
}

std::optional<std::string> decode(const std::string& frame, KvHeader& out, std::size_t& id_len) {
    std::array<unsigned char, kKvFixedSize> fixed{};
    std::copy_n(frame.begin(), kKvFixedSize, fixed.begin());
    return decode_kv_fixed(fixed, 8192, out, id_len);
}

TEST(LmcacheWire, KvHeaderRoundTrip) {
    const KvHeader h = sample_header();
    const std::string frame = encode_kv_header(h);
    ASSERT_EQ(frame.size(), kKvFixedSize + h.req_id.size());
    KvHeader out;
    std::size_t id_len = 0;
    ASSERT_FALSE(decode(frame, out, id_len));
    EXPECT_EQ(out.rank, 1);
    EXPECT_EQ(out.key, h.key);
    EXPECT_EQ(out.tokens, 37u);
    EXPECT_EQ(out.block_tokens, 16u);
    EXPECT_EQ(out.bytes_per_token, 64u);
    EXPECT_EQ(out.bytes, 37u * 64u);
    EXPECT_EQ(id_len, h.req_id.size());
    EXPECT_EQ(frame.substr(kKvFixedSize), "req-abc");
}

TEST(LmcacheWire, KvHeaderRejectsBadFrames) {
    const auto check = [](KvHeader h, std::string_view needle, char magic0 = 'P') {
        std::string frame = encode_kv_header(h);
        frame[0] = magic0;
        KvHeader out;
        std::size_t id_len = 0;
        auto err = decode(frame, out, id_len);
        ASSERT_TRUE(err) << needle;
        EXPECT_NE(err->find(needle), std::string::npos) << *err;
    };
    check(sample_header(), "magic", 'X');
    KvHeader h = sample_header();
    h.bytes += 1;
    check(h, "byte count");
    h = sample_header();
    h.tokens = 0;
    h.bytes = 0;
    check(h, "token count");
    h = sample_header();
    h.tokens = 9000;
    h.bytes = 9000 * 64;
    check(h, "token count");
    h = sample_header();
    h.block_tokens = 0;
    check(h, "block size");
    h = sample_header();
    h.req_id = std::string(kMaxReqIdBytes + 1, 'r');
    check(h, "too long");
}

TEST(LmcacheWire, KvPatternIsDeterministicPerKeyRankAndBlock) {
    const KvPattern p(42, 0, 40, 16, 8);  // blocks of 128 bytes, 320 bytes in all
    ASSERT_EQ(p.size(), 320u);
    std::vector<unsigned char> whole(320);
    p.fill(0, whole);
    // Filling in odd pieces gives the same bytes.
    std::vector<unsigned char> pieces(320);
    for (std::size_t off = 0; off < 320; off += 7) {
        const std::size_t n = std::min<std::size_t>(7, 320 - off);
        p.fill(off, std::span(pieces.data() + off, n));
    }
    EXPECT_EQ(whole, pieces);
    EXPECT_TRUE(p.matches(0, whole));
    EXPECT_TRUE(p.matches(100, std::span(whole.data() + 100, 150)));
    auto flipped = whole;
    flipped[200] ^= 1;
    EXPECT_FALSE(p.matches(0, flipped));
    // Another rank, key or block gives other bytes.
    std::vector<unsigned char> other(320);
    KvPattern(42, 1, 40, 16, 8).fill(0, other);
    EXPECT_NE(whole, other);
    KvPattern(43, 0, 40, 16, 8).fill(0, other);
    EXPECT_NE(whole, other);
    EXPECT_FALSE(std::equal(whole.begin(), whole.begin() + 128, whole.begin() + 128));
}

KvCopy copy(std::uint64_t key, int rank, std::uint32_t tokens = 10, bool corrupt = false) {
    return KvCopy{key, rank, tokens, tokens * 64ULL, corrupt, "r"};
}

TEST(LmcacheInbox, ClaimNeedsEveryRank) {
    LmcacheInbox inbox(Duration{60'000}, 1 << 20);
    const auto t0 = Clock::now();
    inbox.add(copy(7, 0), t0);
    auto err = inbox.claim(7, 10, 2);
    ASSERT_TRUE(err);
    EXPECT_EQ(*err, "lmcache: KV for this prompt not received on rank 1");
    EXPECT_EQ(inbox.copies_held(), 1u);  // a failed claim takes nothing
    inbox.add(copy(7, 1), t0);
    EXPECT_FALSE(inbox.claim(7, 10, 2));
    EXPECT_EQ(inbox.copies_held(), 0u);
    EXPECT_EQ(inbox.bytes_held(), 0u);
    // Claimed once: a second decode of the same prompt finds nothing.
    EXPECT_TRUE(inbox.claim(7, 10, 2));
    EXPECT_EQ(inbox.counters().claimed, 1u);
    EXPECT_EQ(inbox.counters().claim_failures, 2u);
    EXPECT_EQ(inbox.counters().received, 2u);
}

TEST(LmcacheInbox, TwoCopiesServeTwoRequests) {
    LmcacheInbox inbox(Duration{60'000}, 1 << 20);
    const auto t0 = Clock::now();
    for (int i = 0; i < 2; ++i) {
        inbox.add(copy(9, 0), t0);
    }
    EXPECT_FALSE(inbox.claim(9, 10, 1));
    EXPECT_FALSE(inbox.claim(9, 10, 1));
    EXPECT_TRUE(inbox.claim(9, 10, 1));
}

TEST(LmcacheInbox, CorruptAndShortCopiesAreNamed) {
    LmcacheInbox inbox(Duration{60'000}, 1 << 20);
    const auto t0 = Clock::now();
    inbox.add(copy(5, 0), t0);
    inbox.add(copy(5, 1, 10, true), t0);
    auto err = inbox.claim(5, 10, 2);
    ASSERT_TRUE(err);
    EXPECT_NE(err->find("failed verification"), std::string::npos) << *err;
    EXPECT_NE(err->find("rank 1"), std::string::npos) << *err;
    EXPECT_EQ(inbox.counters().corrupt, 1u);
    inbox.add(copy(6, 0, 4), t0);
    err = inbox.claim(6, 10, 1);
    ASSERT_TRUE(err);
    EXPECT_NE(err->find("does not cover"), std::string::npos) << *err;
    // Another key: not received.
    err = inbox.claim(8, 10, 1);
    ASSERT_TRUE(err);
    EXPECT_NE(err->find("not received on rank 0"), std::string::npos) << *err;
}

TEST(LmcacheInbox, TtlAndSizeBound) {
    LmcacheInbox inbox(Duration{1000}, 3 * 640);  // room for three 640-byte copies
    const auto t0 = Clock::now();
    inbox.add(copy(1, 0), t0);
    inbox.add(copy(2, 0), t0 + Duration{500});
    EXPECT_EQ(inbox.next_expiry(), t0 + Duration{1000});
    EXPECT_EQ(inbox.expire(t0 + Duration{999}), 0u);
    EXPECT_EQ(inbox.expire(t0 + Duration{1000}), 1u);
    EXPECT_TRUE(inbox.claim(1, 10, 1));
    EXPECT_EQ(inbox.counters().expired, 1u);
    // Over the bound: the oldest goes first.
    for (std::uint64_t k = 3; k <= 5; ++k) {
        inbox.add(copy(k, 0), t0 + Duration{600});
    }
    EXPECT_EQ(inbox.copies_held(), 3u);
    EXPECT_EQ(inbox.bytes_held(), 3u * 640u);
    EXPECT_EQ(inbox.counters().evicted, 1u);
    EXPECT_TRUE(inbox.claim(2, 10, 1));  // key 2 was the oldest
    EXPECT_FALSE(inbox.claim(5, 10, 1));
    inbox.reset();
    EXPECT_EQ(inbox.copies_held(), 0u);
    EXPECT_EQ(inbox.counters().received, 0u);
    EXPECT_FALSE(inbox.next_expiry());
}

json lmcache_prefill_body() {
    return json::parse(R"({"model":"m","prompt":[101,102,103],"max_tokens":1,"stream":false,
        "kv_transfer_params":{"ret_first_tok":true,"disagg_spec":{"req_id":"r1",
        "receiver_host":"127.0.0.1","receiver_init_port":[8300,8301],
        "receiver_alloc_port":[8310,8311]}}})");
}

TEST(LmcacheParams, ParsesDisaggSpec) {
    LmcacheParams p;
    ASSERT_FALSE(parse_lmcache_params(lmcache_prefill_body()["kv_transfer_params"], p));
    EXPECT_TRUE(p.ret_first_tok);
    ASSERT_TRUE(p.spec);
    EXPECT_EQ(p.spec->req_id, "r1");
    EXPECT_EQ(p.spec->receiver_host, "127.0.0.1");
    EXPECT_EQ(p.spec->init_ports, (std::vector<unsigned short>{8300, 8301}));
    EXPECT_EQ(p.spec->alloc_ports, (std::vector<unsigned short>{8310, 8311}));
    ASSERT_FALSE(parse_lmcache_params(json{{"ret_first_tok", true}}, p));
    EXPECT_FALSE(p.spec);
}

TEST(LmcacheParams, RejectsMalformedSpec) {
    const auto bad = [](const char* patch) {
        json params = lmcache_prefill_body()["kv_transfer_params"];
        params.merge_patch(json::parse(patch));
        LmcacheParams p;
        return parse_lmcache_params(params, p).has_value();
    };
    EXPECT_TRUE(bad(R"({"ret_first_tok":"yes"})"));
    EXPECT_TRUE(bad(R"({"disagg_spec":5})"));
    EXPECT_TRUE(bad(R"({"disagg_spec":{"req_id":""}})"));
    EXPECT_TRUE(bad(R"({"disagg_spec":{"req_id":7}})"));
    EXPECT_TRUE(bad(R"({"disagg_spec":{"receiver_host":null}})"));
    EXPECT_TRUE(bad(R"({"disagg_spec":{"receiver_init_port":[]}})"));
    EXPECT_TRUE(bad(R"({"disagg_spec":{"receiver_init_port":[8300]}})"));  // lengths differ
    EXPECT_TRUE(bad(R"({"disagg_spec":{"receiver_alloc_port":[0,1]}})"));
    EXPECT_TRUE(bad(R"({"disagg_spec":{"receiver_alloc_port":[70000,1]}})"));
    EXPECT_TRUE(bad(R"({"disagg_spec":{"receiver_alloc_port":"8310"}})"));
    EXPECT_FALSE(bad(R"({"disagg_spec":{"extra":1}})"));
}

TEST(LmcacheParams, PrefillRewriteChecks) {
    EXPECT_TRUE(check_lmcache_prefill_request(lmcache_prefill_body(), "r1").empty());
    auto b = lmcache_prefill_body();
    b["prompt"] = "text";
    b["stream"] = true;
    b["kv_transfer_params"]["ret_first_tok"] = false;
    // the spec's req_id ("r1") differs from the request id: the router's own random id, fine
    auto v = check_lmcache_prefill_request(b, "r2");
    ASSERT_EQ(v.size(), 3u);
    EXPECT_NE(v[0].find("stream"), std::string::npos);
    EXPECT_NE(v[1].find("token ids"), std::string::npos);
    EXPECT_NE(v[2].find("ret_first_tok"), std::string::npos);
    v = check_lmcache_prefill_request(lmcache_prefill_body(), "");
    ASSERT_EQ(v.size(), 1u);
    EXPECT_NE(v[0].find("no X-Request-Id"), std::string::npos);
}

TEST(LmcacheFaults, FieldsParse) {
    FaultPlan p;
    ASSERT_FALSE(p.set(R"({"lmcache_drop_notif_ranks":[1],"lmcache_notif_delay_ms":30,
        "lmcache_notif_duplicate":true,"lmcache_notif_garbage":["huge","multipart"],
        "lmcache_fail_after_notif":true,"lmcache_skip_kv_ranks":[0,1],
        "lmcache_corrupt_kv_ranks":[1]})"));
    auto f = p.take();
    ASSERT_TRUE(f);
    const LmcacheFault& l = f->lmcache;
    EXPECT_EQ(l.drop_notif_ranks, std::vector<int>{1});
    EXPECT_EQ(l.notif_delay_ms, 30);
    EXPECT_TRUE(l.notif_duplicate);
    EXPECT_FALSE(l.notif_early);
    EXPECT_EQ(l.notif_garbage,
              (std::vector<NotifGarbage>{NotifGarbage::Huge, NotifGarbage::Multipart}));
    EXPECT_TRUE(l.fail_after_notif);
    EXPECT_EQ(l.skip_kv_ranks, (std::vector<int>{0, 1}));
    EXPECT_EQ(l.corrupt_kv_ranks, std::vector<int>{1});

    ASSERT_FALSE(p.set(R"({"lmcache_notif_garbage":true,"lmcache_notif_early":true})"));
    f = p.take();
    ASSERT_TRUE(f);
    EXPECT_EQ(f->lmcache.notif_garbage.size(), 6u);
    EXPECT_TRUE(f->lmcache.notif_early);
    ASSERT_FALSE(p.set(R"({"lmcache_notif_garbage":"not_msgpack"})"));
    EXPECT_EQ(p.take()->lmcache.notif_garbage, std::vector<NotifGarbage>{NotifGarbage::NotMsgpack});
}

TEST(LmcacheFaults, BadFieldsAreRefused) {
    for (const char* body :
         {R"({"lmcache_drop_notif_ranks":1})", R"({"lmcache_drop_notif_ranks":[-1]})",
          R"({"lmcache_skip_kv_ranks":["0"]})", R"({"lmcache_notif_delay_ms":-5})",
          R"({"lmcache_notif_early":1})", R"({"lmcache_notif_garbage":["junk"]})",
          R"({"lmcache_notif_garbage":5})",
          R"({"lmcache_notif_delay_ms":5,"lmcache_notif_early":true})"}) {
        FaultPlan p;
        EXPECT_TRUE(p.set(body).has_value()) << body;
        EXPECT_FALSE(p.armed()) << body;
    }
}

}  // namespace
}  // namespace pdr::sim
