// Rewrite rules of the pull flow (PROTOCOLS.md §1–2): prefill body, decode body, KV handle,
// request id and the headers both legs carry.
#include "router/disagg/rewrite.hpp"

#include <gtest/gtest.h>

#include <regex>

namespace pdr::disagg {
namespace {

Json parse(std::string_view s) {
    return Json::parse(s);
}

// The prefill body for a client body text (scanned as the router does).
std::string prefill_body_of(std::string_view text) {
    JsonObjectView body;
    EXPECT_EQ(body.scan(text), JsonScanStatus::Ok) << text;
    return make_prefill_body(body);
}

TEST(PrefillBody, RewritesExactlyTheDocumentedFields) {
    const std::string out = prefill_body_of(R"({"model":"m","prompt":"hi","stream":true,
        "stream_options":{"include_usage":true},"max_tokens":50,"max_completion_tokens":40,
        "min_tokens":3,"min_completion_tokens":2,"temperature":0.5,"n":1})");
    EXPECT_EQ(out, R"({"model":"m","prompt":"hi","stream":false,"max_tokens":1,)"
                   R"("max_completion_tokens":1,"temperature":0.5,"n":1,)"
                   R"("kv_transfer_params":{"do_remote_decode":true,"do_remote_prefill":false,)"
                   R"("remote_engine_id":null,"remote_block_ids":null,"remote_host":null,)"
                   R"("remote_port":null}})");
}

TEST(PrefillBody, AddsStreamAndMaxTokensButNotMaxCompletionTokens) {
    Json out =
        parse(prefill_body_of(R"({"model":"m","messages":[{"role":"user","content":"x"}]})"));
    EXPECT_EQ(out["stream"], false);
    EXPECT_EQ(out["max_tokens"], 1);
    EXPECT_FALSE(out.contains("max_completion_tokens"));
    EXPECT_FALSE(out.contains("stream_options"));
    EXPECT_EQ(out["messages"], parse(R"([{"role":"user","content":"x"}])"));
}

TEST(PrefillBody, KeepsOtherValuesAsTheClientWroteThem) {
    // Numbers, escapes and nested spacing pass through as bytes (no float reformatting).
    const std::string out = prefill_body_of(
        R"({"model":"m","prompt":"caf\u00e9","temperature":1.0E0,"logit_bias":{ "50256" : -100 }})");
    EXPECT_EQ(out, R"({"model":"m","prompt":"caf\u00e9","temperature":1.0E0,)"
                   R"("logit_bias":{ "50256" : -100 },"stream":false,"max_tokens":1,)"
                   R"("kv_transfer_params":)" +
                       std::string(kPrefillKvRequest) + "}");
}

TEST(PrefillBody, DuplicateKeysKeepTheLastValueAtTheFirstPlace) {
    Json out = parse(prefill_body_of(R"({"model":"a","prompt":"p","model":"b","max_tokens":3})"));
    EXPECT_EQ(out.dump(), R"({"model":"b","prompt":"p","max_tokens":1,"stream":false,)"
                          R"("kv_transfer_params":)" +
                              parse(kPrefillKvRequest).dump() + "}");
}

TEST(PrefillBody, KvRequestHasExactKeysWithExplicitNulls) {
    Json kv = parse(kPrefillKvRequest);
    ASSERT_TRUE(kv.is_object());
    EXPECT_EQ(kv.size(), 6u);
    EXPECT_EQ(kv["do_remote_decode"], true);
    EXPECT_EQ(kv["do_remote_prefill"], false);
    for (const char* k : {"remote_engine_id", "remote_block_ids", "remote_host", "remote_port"}) {
        ASSERT_TRUE(kv.contains(k)) << k;
        EXPECT_TRUE(kv[k].is_null()) << k;
    }
}

TEST(PrefillBody, ReplacesAClientKvTransferParams) {
    Json out = parse(prefill_body_of(R"({"model":"m","prompt":"p","kv_transfer_params":{"x":1}})"));
    EXPECT_EQ(out["kv_transfer_params"], parse(kPrefillKvRequest));
}

constexpr std::string_view kPrefillAnswer =
    R"({"id":"cmpl-1","choices":[{"text":"a"}],"kv_transfer_params":{"remote_request_id":"rid-7",)"
    R"("do_remote_prefill":true,"do_remote_decode":false,"remote_block_ids":[[1,2],[3]],)"
    R"("remote_engine_id":"eng","remote_host":"10.0.0.1","remote_port":5600,"tp_size":1,)"
    R"("remote_blocks_expiry_time":1.5,"transfer_mode":"pull"}})";
constexpr std::string_view kHandleText =
    R"({"remote_request_id":"rid-7","do_remote_prefill":true,"do_remote_decode":false,)"
    R"("remote_block_ids":[[1,2],[3]],"remote_engine_id":"eng","remote_host":"10.0.0.1",)"
    R"("remote_port":5600,"tp_size":1,"remote_blocks_expiry_time":1.5,"transfer_mode":"pull"})";

TEST(KvHandle, ParsesTheObjectVerbatim) {
    KvHandle h;
    ASSERT_EQ(parse_kv_handle(kPrefillAnswer, h), HandleStatus::Ok);
    EXPECT_EQ(h.remote_request_id, "rid-7");
    EXPECT_EQ(h.params, kHandleText);  // the bytes P sent
}

TEST(KvHandle, TakesTheTransferMode) {
    KvHandle h;
    ASSERT_EQ(parse_kv_handle(kPrefillAnswer, h), HandleStatus::Ok);
    EXPECT_EQ(h.transfer_mode, "pull");
    ASSERT_EQ(parse_kv_handle(R"({"kv_transfer_params":{"transfer_mode":"push","a":1}})", h),
              HandleStatus::Ok);
    EXPECT_EQ(h.transfer_mode, "push");
    ASSERT_EQ(parse_kv_handle(R"({"kv_transfer_params":{"transfer_mode":7}})", h),
              HandleStatus::Ok);
    EXPECT_EQ(h.transfer_mode, "");
    ASSERT_EQ(parse_kv_handle(R"({"kv_transfer_params":{"a":1}})", h), HandleStatus::Ok);
    EXPECT_EQ(h.transfer_mode, "");
}

TEST(KvHost, LoopbackAndWildcardHosts) {
    for (const char* h :
         {"", "localhost", "LocalHost", "localhost.", "p.localhost", "127.0.0.1", "127.1.2.3",
          "::1", "[::1]", "0.0.0.0", "::", "::ffff:127.0.0.1", "0:0:0:0:0:0:0:1"}) {
        EXPECT_TRUE(is_loopback_or_wildcard_host(h)) << h;
    }
    for (const char* h : {"10.0.0.1", "p0.example", "fe80::1", "128.0.0.1", "localhost.example",
                          "mylocalhost", "::ffff:10.0.0.1"}) {
        EXPECT_FALSE(is_loopback_or_wildcard_host(h)) << h;
    }
}

TEST(KvHost, AutoRewritesOnlyALoopbackOrWildcardHost) {
    std::string params = R"({"remote_block_ids":[1],"remote_host":"localhost","remote_port":5600})";
    EXPECT_TRUE(rewrite_kv_host(params, "10.0.0.7", false));
    EXPECT_EQ(params, R"({"remote_block_ids":[1],"remote_host":"10.0.0.7","remote_port":5600})");
    params = R"({"remote_host":"0.0.0.0"})";
    EXPECT_TRUE(rewrite_kv_host(params, "fd00::7", false));
    EXPECT_EQ(params, R"({"remote_host":"fd00::7"})");
    // A host P was told is its own: kept.
    params = R"({"remote_host":"10.0.0.9","remote_port":5600})";
    EXPECT_FALSE(rewrite_kv_host(params, "10.0.0.7", false));
    EXPECT_EQ(params, R"({"remote_host":"10.0.0.9","remote_port":5600})");
    // None or not a string: nothing to rewrite (D refuses such a handle itself).
    params = R"({"remote_port":5600})";
    EXPECT_FALSE(rewrite_kv_host(params, "10.0.0.7", false));
    params = R"({"remote_host":5})";
    EXPECT_FALSE(rewrite_kv_host(params, "10.0.0.7", false));
    // The same host already: unchanged.
    params = R"({"remote_host":"127.0.0.1"})";
    EXPECT_FALSE(rewrite_kv_host(params, "127.0.0.1", false));
}

TEST(KvHost, AlwaysRewritesAnyHost) {
    std::string params = R"({"remote_host":"10.0.0.9","remote_port":5600})";
    EXPECT_TRUE(rewrite_kv_host(params, "p0.svc", true));
    EXPECT_EQ(params, R"({"remote_host":"p0.svc","remote_port":5600})");
    params = R"({"remote_port":5600})";
    EXPECT_TRUE(rewrite_kv_host(params, "p0.svc", true));
    EXPECT_EQ(params, R"({"remote_port":5600,"remote_host":"p0.svc"})");
    params = "not json";
    EXPECT_FALSE(rewrite_kv_host(params, "p0.svc", true));
    EXPECT_EQ(params, "not json");
}

TEST(DecodeKvParams, TakenOutOfAWholeAnswer) {
    std::string body =
        R"({"id":"c","choices":[{"text":"a"}],"kv_transfer_params":{"remote_block_ids":[1]},)"
        R"("usage":{"prompt_tokens":1}})";
    EXPECT_TRUE(strip_kv_params(body));
    EXPECT_EQ(body, R"({"id":"c","choices":[{"text":"a"}],"usage":{"prompt_tokens":1}})");
    // Only the top-level member: a string that mentions the key stays.
    body = R"({"choices":[{"text":"kv_transfer_params"}]})";
    EXPECT_FALSE(strip_kv_params(body));
    EXPECT_EQ(body, R"({"choices":[{"text":"kv_transfer_params"}]})");
    body = "kv_transfer_params: not json";
    EXPECT_FALSE(strip_kv_params(body));
}

TEST(DecodeKvParams, TakenOutOfStreamEventsOnly) {
    std::string events =
        "data: {\"choices\":[{\"text\":\"a\"}]}\n\n"
        "data: {\"choices\":[{\"text\":\"b\"}],\"kv_transfer_params\":"
        "{\"remote_host\":\"10.0.0.1\"}}\r\n\r\n"
        ": kv_transfer_params comment\n\n"
        "data:[DONE]\n\n";
    EXPECT_TRUE(strip_kv_params_events(events));
    EXPECT_EQ(events,
              "data: {\"choices\":[{\"text\":\"a\"}]}\n\n"
              "data: {\"choices\":[{\"text\":\"b\"}]}\r\n\r\n"
              ": kv_transfer_params comment\n\n"
              "data:[DONE]\n\n");
    std::string plain = "data: {\"choices\":[]}\n\ndata: [DONE]\n\n";
    const std::string before = plain;
    EXPECT_FALSE(strip_kv_params_events(plain));
    EXPECT_EQ(plain, before);
}

TEST(KvHandle, MissingNullEmptyOrNotJson) {
    KvHandle h;
    EXPECT_EQ(parse_kv_handle(R"({"choices":[]})", h), HandleStatus::Missing);
    EXPECT_EQ(parse_kv_handle(R"({"kv_transfer_params":null})", h), HandleStatus::Missing);
    EXPECT_EQ(parse_kv_handle(R"({"kv_transfer_params":{}})", h), HandleStatus::Missing);
    EXPECT_EQ(parse_kv_handle(R"({"kv_transfer_params":"x"})", h), HandleStatus::Missing);
    EXPECT_EQ(parse_kv_handle("not json", h), HandleStatus::NotJson);
    EXPECT_EQ(parse_kv_handle("[1,2]", h), HandleStatus::NotJson);
    EXPECT_EQ(parse_kv_handle("", h), HandleStatus::NotJson);
}

TEST(KvHandle, KeptByteForByteAndLastDuplicateWins) {
    KvHandle h;
    const std::string_view answer =
        R"({"kv_transfer_params":{"a":1},"x":[],"kv_transfer_params":{ "remote_request_id" : )"
        R"("r\u0031", "n": 1.50 }})";
    ASSERT_EQ(parse_kv_handle(answer, h), HandleStatus::Ok);
    EXPECT_EQ(h.params, R"({ "remote_request_id" : "r\u0031", "n": 1.50 })");
    EXPECT_EQ(h.remote_request_id, "r1");
    EXPECT_EQ(parse_kv_handle(R"({"kv_transfer_params":{"a":1},"bad":tru})", h),
              HandleStatus::NotJson);
    EXPECT_EQ(parse_kv_handle("{\"kv_transfer_params\":{\"a\":\"\xff\"}}", h),
              HandleStatus::NotJson);
}

TEST(KvHandle, NonStringRequestIdIsIgnored) {
    KvHandle h;
    ASSERT_EQ(parse_kv_handle(R"({"kv_transfer_params":{"remote_request_id":5,"a":1}})", h),
              HandleStatus::Ok);
    EXPECT_TRUE(h.remote_request_id.empty());
}

TEST(DecodeBody, IsTheOriginalTextPlusTheHandle) {
    const std::string original =
        R"({"model":"m", "prompt":"hello", "stream":true, "max_tokens":7,"min_tokens":2})";
    KvHandle h;
    ASSERT_EQ(parse_kv_handle(kPrefillAnswer, h), HandleStatus::Ok);
    const std::string out = make_decode_body(original, h.params);
    // The client's bytes are kept unchanged, the handle is appended verbatim.
    EXPECT_EQ(out, original.substr(0, original.size() - 1) + R"(,"kv_transfer_params":)" +
                       std::string(kHandleText) + "}");
    Json expect = parse(original);
    expect["kv_transfer_params"] = parse(kHandleText);
    EXPECT_EQ(parse(out), expect);
}

TEST(DecodeBody, EmptyObjectAndWhitespace) {
    const std::string handle = R"({"a":1})";
    EXPECT_EQ(make_decode_body("{}", handle), R"({"kv_transfer_params":{"a":1}})");
    EXPECT_EQ(make_decode_body("  { \n }\n", handle), "{ \n \"kv_transfer_params\":{\"a\":1}}");
    EXPECT_EQ(parse(make_decode_body("{\"x\":[1,{}]}\r\n", handle)),
              parse(R"({"x":[1,{}],"kv_transfer_params":{"a":1}})"));
}

TEST(DecodeBody, ReplacesAClientKvTransferParams) {
    const std::string handle = R"({"a":1})";
    const std::string out =
        make_decode_body(R"({"model":"m","kv_transfer_params":{"old":true},"prompt":"p"})", handle);
    Json j = parse(out);
    EXPECT_EQ(j["kv_transfer_params"], parse(R"({"a":1})"));
    EXPECT_EQ(j["model"], "m");
    EXPECT_EQ(j["prompt"], "p");
    EXPECT_EQ(j.size(), 3u);
}

TEST(DecodeBody, KeyNameInsideAStringStillGivesValidJson) {
    const std::string handle = R"({"a":1})";
    const std::string original = R"({"prompt":"say kv_transfer_params","model":"m"})";
    Json j = parse(make_decode_body(original, handle));
    EXPECT_EQ(j["prompt"], "say kv_transfer_params");
    EXPECT_EQ(j["kv_transfer_params"], parse(handle));
}

server::Request client_request(std::initializer_list<std::pair<std::string, std::string>> hs) {
    server::Request req{http::verb::post, "/v1/completions", 11};
    for (const auto& [k, v] : hs) {
        req.set(k, v);
    }
    return req;
}

TEST(RequestId, ClientValueIsKept) {
    EXPECT_EQ(request_id_for(client_request({{"X-Request-Id", "abc-123"}})), "abc-123");
    EXPECT_EQ(request_id_for(client_request({{"x-request-id", "lower"}})), "lower");
}

TEST(RequestId, MissingOrInsaneGetsAUuidV4) {
    const std::regex uuid("[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}");
    const std::string a = request_id_for(client_request({}));
    const std::string b = request_id_for(client_request({}));
    EXPECT_TRUE(std::regex_match(a, uuid)) << a;
    EXPECT_NE(a, b);
    EXPECT_TRUE(std::regex_match(request_id_for(client_request({{"X-Request-Id", ""}})), uuid));
    EXPECT_TRUE(std::regex_match(
        request_id_for(client_request({{"X-Request-Id", std::string(300, 'a')}})), uuid));
    EXPECT_TRUE(std::regex_match(request_id_for(client_request({{"X-Request-Id", "a b"}})), uuid));
}

TEST(LegHeaders, UpstreamKeyWinsOverClientAuthorization) {
    auto req = client_request(
        {{"Authorization", "Bearer client"}, {"traceparent", "00-a-b-01"}, {"tracestate", "k=v"}});
    LegHeaders h = leg_headers(req, "secret");
    EXPECT_EQ(h.authorization, "Bearer secret");
    EXPECT_EQ(h.traceparent, "00-a-b-01");
    EXPECT_EQ(h.tracestate, "k=v");
}

TEST(LegHeaders, ClientAuthorizationForwardedWhenNoUpstreamKey) {
    EXPECT_EQ(leg_headers(client_request({{"Authorization", "Bearer client"}}), "").authorization,
              "Bearer client");
    LegHeaders none = leg_headers(client_request({}), "");
    EXPECT_TRUE(none.authorization.empty());
    EXPECT_TRUE(none.traceparent.empty());
    EXPECT_TRUE(none.tracestate.empty());
}

TEST(LegRequest, CarriesTheDocumentedHeadersOnly) {
    LegHeaders h{"Bearer k", "00-trace", "", "", false};
    upstream::PreparedRequest r =
        make_leg_request(http::verb::post, "/v1/chat/completions", "rid-1", h, "{\"a\":1}");
    EXPECT_EQ(r.method, http::verb::post);
    EXPECT_EQ(r.target, "/v1/chat/completions");
    EXPECT_EQ(r.fields,
              "Content-Type: application/json\r\nX-Request-Id: rid-1\r\n"
              "Authorization: Bearer k\r\ntraceparent: 00-trace\r\n");
    EXPECT_EQ(r.field("content-type"), "application/json");
    EXPECT_EQ(r.field("tracestate"), "");
    EXPECT_EQ(r.request_id, "rid-1");
    EXPECT_EQ(r.body, "{\"a\":1}");
    EXPECT_TRUE(r.keep_alive);
    EXPECT_FALSE(r.has_host);

    upstream::PreparedRequest bare =
        make_leg_request(http::verb::get, "/v1/models", "rid-2", {}, "");
    EXPECT_EQ(bare.fields, "X-Request-Id: rid-2\r\n");
}

TEST(LegRequest, RouterKeyOnlyWhereAllowedAndHopsCarriedOn) {
    LegHeaders h = leg_headers(client_request({{"X-Pdrouter-Hop", "r-a"}}), "secret", "r-b");
    EXPECT_EQ(h.hops, "r-a,r-b");
    upstream::PreparedRequest allowed =
        make_leg_request(http::verb::post, "/v1/completions", "rid", h, "{}");
    EXPECT_EQ(allowed.field("Authorization"), "Bearer secret");
    EXPECT_EQ(allowed.field("X-Pdrouter-Hop"), "r-a,r-b");
    upstream::PreparedRequest withheld =
        make_leg_request(http::verb::post, "/v1/completions", "rid", h, "{}", false);
    EXPECT_EQ(withheld.fields.find("Authorization"), std::string::npos);
    // The client's own key is the client's to give: it goes on either way.
    LegHeaders client = leg_headers(client_request({{"Authorization", "Bearer c"}}), "", "r-b");
    EXPECT_EQ(
        make_leg_request(http::verb::post, "/x", "rid", client, "{}", false).field("authorization"),
        "Bearer c");
}

TEST(HopLoop, OwnIdOrTooManyHops) {
    EXPECT_FALSE(is_hop_loop(client_request({}), "me"));
    EXPECT_FALSE(is_hop_loop(client_request({{"X-Pdrouter-Hop", "a, b"}}), "me"));
    EXPECT_TRUE(is_hop_loop(client_request({{"X-Pdrouter-Hop", "a, me"}}), "me"));
    EXPECT_TRUE(is_hop_loop(client_request({{"X-Pdrouter-Hop", "me"}}), "me"));
    EXPECT_FALSE(is_hop_loop(client_request({{"X-Pdrouter-Hop", "mem,ame"}}), "me"));
    EXPECT_TRUE(is_hop_loop(client_request({{"X-Pdrouter-Hop", "1,2,3,4,5,6,7,8"}}), "me"));
}

TEST(PlainDecodeBody, KeepsTheTextButDropsAClientKvTransferParams) {
    const std::string plain = R"({"model":"m",  "prompt":"p"})";
    EXPECT_EQ(make_plain_decode_body(plain), plain);  // untouched, byte for byte
    const std::string forged =
        R"({"model":"m","kv_transfer_params":{"do_remote_prefill":true,"remote_host":"10.9.9.9"},"prompt":"p"})";
    Json out = Json::parse(make_plain_decode_body(forged));
    EXPECT_EQ(out, Json::parse(R"({"model":"m","prompt":"p"})"));
    // The key named only inside a string value leaves the body as it is.
    const std::string mention = R"({"model":"m","prompt":"kv_transfer_params"})";
    EXPECT_EQ(make_plain_decode_body(mention), mention);
}

TEST(KvHandle, TooDeepAnswerIsRejectedBeforeParsing) {
    KvHandle h;
    const std::string deep = "{\"kv_transfer_params\":{\"a\":" + std::string(kMaxJsonDepth, '[') +
                             std::string(kMaxJsonDepth, ']') + "}}";
    EXPECT_EQ(parse_kv_handle(deep, h), HandleStatus::NotJson);
}

TEST(ContentType, JsonWithParametersIsAccepted) {
    EXPECT_TRUE(is_json_content_type("application/json"));
    EXPECT_TRUE(is_json_content_type("Application/JSON"));
    EXPECT_TRUE(is_json_content_type("application/json; charset=utf-8"));
    EXPECT_TRUE(is_json_content_type(" application/json ;charset=UTF-8"));
    EXPECT_FALSE(is_json_content_type(""));
    EXPECT_FALSE(is_json_content_type("text/plain"));
    EXPECT_FALSE(is_json_content_type("application/x-www-form-urlencoded"));
    EXPECT_FALSE(is_json_content_type("application/jsonx"));
}

}  // namespace
}  // namespace pdr::disagg
