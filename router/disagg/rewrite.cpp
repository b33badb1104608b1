#include "router/disagg/rewrite.hpp"

#include "router/common/uuid.hpp"

#include <algorithm>
#include <cctype>

namespace pdr::disagg {

namespace {

constexpr std::string_view kKvKey = "kv_transfer_params";

bool iequals(std::string_view a, std::string_view b) noexcept {
    return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
               return std::tolower(static_cast<unsigned char>(x)) ==
                      std::tolower(static_cast<unsigned char>(y));
           });
}

bool is_space(char c) noexcept {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

std::string_view trim(std::string_view s) noexcept {
    while (!s.empty() && is_space(s.front())) {
        s.remove_prefix(1);
    }
    while (!s.empty() && is_space(s.back())) {
        s.remove_suffix(1);
    }
    return s;
}

std::string header_value(const server::Request& req, std::string_view name) {
    auto it = req.find(name);
    return it == req.end() ? std::string{} : std::string(it->value());
}

}  // namespace

std::string dump(const Json& j) {
    return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

std::string request_id_for(const server::Request& client) {
    auto it = client.find(kRequestIdHeader);
    if (it != client.end()) {
        std::string_view v = it->value();
        bool sane = !v.empty() && v.size() <= kMaxRequestIdLength &&
                    std::all_of(v.begin(), v.end(), [](char c) { return c > 0x20 && c < 0x7f; });
        if (sane) {
            return std::string(v);
        }
    }
    return make_uuid_v4();
}

LegHeaders leg_headers(const server::Request& client, std::string_view upstream_api_key) {
    LegHeaders h;
    if (!upstream_api_key.empty()) {
        h.authorization.reserve(7 + upstream_api_key.size());
        h.authorization.append("Bearer ").append(upstream_api_key);
    } else {
        h.authorization = header_value(client, "Authorization");
    }
    h.traceparent = header_value(client, "traceparent");
    h.tracestate = header_value(client, "tracestate");
    return h;
}

upstream::Request make_leg_request(http::verb verb, std::string_view target,
                                   std::string_view request_id, const LegHeaders& headers,
                                   std::string body) {
    upstream::Request req{verb, target, 11};
    req.keep_alive(true);
    if (!body.empty() || verb == http::verb::post) {
        req.set(http::field::content_type, "application/json");
    }
    req.set(kRequestIdHeader, request_id);
    if (!headers.authorization.empty()) {
        req.set(http::field::authorization, headers.authorization);
    }
    if (!headers.traceparent.empty()) {
        req.set("traceparent", headers.traceparent);
    }
    if (!headers.tracestate.empty()) {
        req.set("tracestate", headers.tracestate);
    }
    req.body() = std::move(body);
    return req;
}

Json prefill_kv_request() {
    Json kv = Json::object();
    kv["do_remote_decode"] = true;
    kv["do_remote_prefill"] = false;
    kv["remote_engine_id"] = nullptr;
    kv["remote_block_ids"] = nullptr;
    kv["remote_host"] = nullptr;
    kv["remote_port"] = nullptr;
    return kv;
}

std::string make_prefill_body(Json& body) {
    body["stream"] = false;
    body.erase("stream_options");
    body["max_tokens"] = 1;
    if (body.contains("max_completion_tokens")) {
        body["max_completion_tokens"] = 1;
    }
    body.erase("min_tokens");
    body.erase("min_completion_tokens");
    body[std::string(kKvKey)] = prefill_kv_request();
    return dump(body);
}

std::string make_decode_body(std::string_view original, const Json& handle) {
    std::string_view text = trim(original);
    bool mentions_key = text.find(kKvKey) != std::string_view::npos;
    if (!mentions_key && text.size() >= 2 && text.front() == '{' && text.back() == '}') {
        // Splice: `<original without its closing brace>[,]"kv_transfer_params":<handle>}`.
        std::string_view head = text.substr(0, text.size() - 1);
        bool empty_object = trim(head) == "{";
        std::string handle_text = dump(handle);
        std::string out;
        out.reserve(head.size() + kKvKey.size() + handle_text.size() + 8);
        out.append(head);
        if (!empty_object) {
            out.push_back(',');
        }
        out.append("\"").append(kKvKey).append("\":").append(handle_text).push_back('}');
        return out;
    }
    // Rare: the client sent its own kv_transfer_params (or the text is unusual): replace it.
    Json body = Json::parse(original, nullptr, false);
    if (!body.is_object()) {
        body = Json::object();
    }
    body[std::string(kKvKey)] = handle;
    return dump(body);
}

std::string make_plain_decode_body(std::string_view original) {
    if (original.find(kKvKey) == std::string_view::npos) {
        return std::string(original);
    }
    Json body = Json::parse(original, nullptr, false);
    if (!body.is_object() || body.erase(std::string(kKvKey)) == 0) {
        return std::string(original);
    }
    return dump(body);
}

HandleStatus parse_kv_handle(std::string_view prefill_answer, KvHandle& out) {
    if (!json_shape_ok(prefill_answer)) {
        return HandleStatus::NotJson;
    }
    // Only kv_transfer_params is needed from P's (often long) answer: the callback drops every
    // other top-level member while parsing, so the DOM holds just the root and the handle. The
    // verdicts (valid JSON object, key present, last duplicate wins) are those of a full parse.
    bool in_kv = false;
    auto keep_handle_only = [&in_kv](int depth, Json::parse_event_t event, Json& parsed) {
        if (depth == 1 && event == Json::parse_event_t::key) {
            in_kv = parsed.is_string() && parsed.get_ref<const std::string&>() == kKvKey;
            return in_kv;
        }
        return depth < 1 || in_kv;
    };
    Json answer = Json::parse(prefill_answer, keep_handle_only, false);
    if (answer.is_discarded() || !answer.is_object()) {
        return HandleStatus::NotJson;
    }
    auto it = answer.find(kKvKey);
    if (it == answer.end() || !it->is_object() || it->empty()) {
        return HandleStatus::Missing;
    }
    out.params = std::move(*it);
    out.remote_request_id.clear();
    auto rid = out.params.find("remote_request_id");
    if (rid != out.params.end() && rid->is_string()) {
        out.remote_request_id = rid->get<std::string>();
    }
    return HandleStatus::Ok;
}

bool is_json_content_type(std::string_view value) noexcept {
    auto semi = value.find(';');
    std::string_view media = trim(value.substr(0, semi));
    return iequals(media, "application/json");
}

}  // namespace pdr::disagg
