#pragma once
// Pure request/response rewriting for the disaggregated flows (PROTOCOLS.md §1–2): the prefill
// body, the decode body, the KV handle in P's answer, the request id and the headers both legs
// carry. No I/O here, so every rule is unit-tested directly.
#include "net/common/json_limits.hpp"
#include "net/common/json_scan.hpp"
#include "net/common/request_id.hpp"
#include "net/server/http_server.hpp"
#include "net/upstream/client.hpp"

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <string_view>

namespace pdr::disagg {

// JSON documents the router builds itself (status pages, errors); insertion-ordered. Client
// bodies and prefill answers are never parsed into one: they are scanned (JsonObjectView) and
// passed on as the bytes they were, with only the documented top-level fields changed.
using Json = nlohmann::ordered_json;

// Compact serialization that never throws (invalid UTF-8 is replaced).
std::string dump(const Json& j);

// The client's X-Request-Id when present and sane (1..256 visible ASCII characters), else a
// fresh UUIDv4.
std::string request_id_for(const server::Request& client);

// The headers both legs carry besides Content-Type and X-Request-Id.
struct LegHeaders {
    std::string authorization;  // "Bearer <upstream key>", else the client's header, else empty
    std::string traceparent;
    std::string tracestate;
    std::string hops;         // X-Pdrouter-Hop: the client's list and this router's id
    bool router_key = false;  // `authorization` is the router's --upstream-api-key
};
// `router_id`: this router's id, appended to the client's X-Pdrouter-Hop list ("" leaves none).
LegHeaders leg_headers(const server::Request& client, std::string_view upstream_api_key,
                       std::string_view router_id = {});

// Loops (router/instances/instance.hpp kHopHeader): true when the client's X-Pdrouter-Hop list
// names `router_id`, or holds kMaxHops routers already.
inline constexpr std::size_t kMaxHops = 8;
bool is_hop_loop(const server::Request& client, std::string_view router_id);

// An upstream request: `verb target`, Content-Type: application/json (when a body is given),
// X-Request-Id, and the LegHeaders that are not empty, serialized in that order. Host and
// Content-Length are added by the client.
// `key_allowed` false (an instance outside --instance-allow): the router's own key is left out.
upstream::PreparedRequest make_leg_request(http::verb verb, std::string_view target,
                                           std::string_view request_id, const LegHeaders& headers,
                                           std::string body, bool key_allowed = true);

// The prefill body from the scanned client body: every member as the client wrote it, in its
// order, except stream:false, no stream_options, max_tokens:1, max_completion_tokens:1 if
// present, no min_tokens/min_completion_tokens, and the pull-mode kv_transfer_params request
// object (with its explicit nulls), or `kv_request` (push mode's, or one carrying the router
// agent's descriptor: push_rewrite.hpp).
inline constexpr std::string_view kPrefillKvRequest =
    R"({"do_remote_decode":true,"do_remote_prefill":false,"remote_engine_id":null,)"
    R"("remote_block_ids":null,"remote_host":null,"remote_port":null})";
std::string make_prefill_body(const JsonObjectView& body,
                              std::string_view kv_request = kPrefillKvRequest);

// The decode body: the client's original body text plus "kv_transfer_params": <handle>. The
// original bytes are kept as they are (the handle is spliced in before the closing brace); if
// the client already sent a kv_transfer_params key it is replaced. `original` must be the text
// of a JSON object.
std::string make_decode_body(std::string_view original, std::string_view handle);
// The body of a decode leg without a handle (recompute, direct flow): the client's original text,
// minus any `kv_transfer_params` the client put there itself — KV handles only ever come from
// prefill answers, so a client cannot point a decode instance at blocks of its choosing.
std::string make_plain_decode_body(std::string_view original);

// P's KV handle: the top-level `kv_transfer_params` object of P's answer. Missing, null or not
// an object → no handle.
struct KvHandle {
    std::string params;             // the object's text, verbatim
    std::string remote_request_id;  // params.remote_request_id when it is a string, else empty
    std::string transfer_mode;      // params.transfer_mode when it is a string, else empty
};
enum class HandleStatus { Ok, NotJson, Missing };
HandleStatus parse_kv_handle(std::string_view prefill_answer, KvHandle& out);

// Pull mode's --rewrite-kv-host: P reports the side-channel host D should reach it at, which is
// "localhost" when the engine was not told its address (vLLM: VLLM_NIXL_SIDE_CHANNEL_HOST unset).
// Sets `params`' remote_host to `p_host` (the address the router reached P at) when `always`, or
// when remote_host is a loopback or wildcard address (empty, localhost, 127.0.0.0/8, ::1, 0.0.0.0,
// ::). Returns whether it changed `params` (an object's text; anything else is left alone).
bool rewrite_kv_host(std::string& params, std::string_view p_host, bool always);
// True for "", "localhost" (and names under .localhost) and loopback or unspecified addresses.
bool is_loopback_or_wildcard_host(std::string_view host);

// D's answer without its top-level kv_transfer_params (vLLM returns D's own block ids and host
// there, for multi-turn reuse): a JSON object's text, or an SSE data payload. Returns false, and
// leaves `text` alone, when there is no such member (or the text is not a JSON object).
bool strip_kv_params(std::string& text);
// The same for each `data:` line of whole SSE events; every other byte is kept as it is.
bool strip_kv_params_events(std::string& events);

// "application/json" with optional parameters, case-insensitive.
bool is_json_content_type(std::string_view value) noexcept;

}  // namespace pdr::disagg
