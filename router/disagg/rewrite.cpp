#include "router/disagg/rewrite.hpp"

#include "config/ascii.hpp"
#include "net/common/fields.hpp"
#include "net/common/sse_cut.hpp"

#include "net/common/uuid.hpp"
#include "router/instances/instance.hpp"

#include <boost/asio/ip/address.hpp>

#include <algorithm>
#include <cctype>

namespace pdr::disagg {

namespace {

constexpr std::string_view kKvKey = "kv_transfer_params";

// JSON's whitespace around a body (not ascii::trim: a body may hold line ends too).
bool is_space(char c) noexcept {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

std::string_view json_trim(std::string_view s) noexcept {
    while (!s.empty() && is_space(s.front())) {
        s.remove_prefix(1);
    }
    while (!s.empty() && is_space(s.back())) {
        s.remove_suffix(1);
    }
    return s;
}

std::string header_value(const server::Request& req, std::string_view name) {
    return std::string(wire::field_value(req, name));
}

}  // namespace

std::string dump(const Json& j) {
    return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

std::string request_id_for(const server::Request& client) {
    return request_id_of(client);
}

LegHeaders leg_headers(const server::Request& client, std::string_view upstream_api_key,
                       std::string_view router_id) {
    LegHeaders h;
    if (!router_id.empty()) {
        h.hops = header_value(client, instances::kHopHeader);
        h.hops.append(h.hops.empty() ? "" : ",").append(router_id);
    }
    if (!upstream_api_key.empty()) {
        h.router_key = true;
        h.authorization.reserve(7 + upstream_api_key.size());
        h.authorization.append("Bearer ").append(upstream_api_key);
    } else {
        h.authorization = header_value(client, "Authorization");
    }
    h.traceparent = header_value(client, "traceparent");
    h.tracestate = header_value(client, "tracestate");
    return h;
}

bool is_hop_loop(const server::Request& client, std::string_view router_id) {
    const auto* hop = wire::find_field(client, instances::kHopHeader);
    if (hop == nullptr) {
        return false;
    }
    std::string_view list = hop->value();
    std::size_t hops = 0;
    while (!list.empty()) {
        const auto comma = list.find(',');
        if (ascii::trim(list.substr(0, comma)) == router_id || ++hops >= kMaxHops) {
            return true;
        }
        list.remove_prefix(comma == std::string_view::npos ? list.size() : comma + 1);
    }
    return false;
}

upstream::PreparedRequest make_leg_request(http::verb verb, std::string_view target,
                                           std::string_view request_id, const LegHeaders& headers,
                                           std::string body, bool key_allowed) {
    upstream::PreparedRequest req;
    req.method = verb;
    req.target.assign(target);
    req.fields.reserve(64 + request_id.size() + headers.authorization.size() + headers.hops.size() +
                       headers.traceparent.size() + headers.tracestate.size());
    if (!body.empty() || verb == http::verb::post) {
        req.add("Content-Type", "application/json");
    }
    req.add(kRequestIdHeader, request_id);
    req.request_id.assign(request_id);
    if (!headers.authorization.empty() && (key_allowed || !headers.router_key)) {
        req.add("Authorization", headers.authorization);
    }
    if (!headers.hops.empty()) {
        req.add(instances::kHopHeader, headers.hops);
    }
    if (!headers.traceparent.empty()) {
        req.add("traceparent", headers.traceparent);
    }
    if (!headers.tracestate.empty()) {
        req.add("tracestate", headers.tracestate);
    }
    req.body = std::move(body);
    return req;
}

std::string make_prefill_body(const JsonObjectView& body, std::string_view kv_request) {
    using Op = JsonEdit::Op;
    return body.rewrite({{"stream", "false", Op::Set},
                         {"stream_options", {}, Op::Erase},
                         {"max_tokens", "1", Op::Set},
                         {"max_completion_tokens", "1", Op::SetIfPresent},
                         {"min_tokens", {}, Op::Erase},
                         {"min_completion_tokens", {}, Op::Erase},
                         {kKvKey, kv_request, Op::Set}});
}

std::string make_decode_body(std::string_view original, std::string_view handle) {
    std::string_view text = json_trim(original);
    bool mentions_key = text.find(kKvKey) != std::string_view::npos;
    if (!mentions_key && text.size() >= 2 && text.front() == '{' && text.back() == '}') {
        // Splice: `<original without its closing brace>[,]"kv_transfer_params":<handle>}`.
        std::string_view head = text.substr(0, text.size() - 1);
        bool empty_object = json_trim(head) == "{";
        std::string out;
        out.reserve(head.size() + kKvKey.size() + handle.size() + 8);
        out.append(head);
        if (!empty_object) {
            out.push_back(',');
        }
        out.append("\"").append(kKvKey).append("\":").append(handle).push_back('}');
        return out;
    }
    // Rare: the client sent its own kv_transfer_params (or the text is unusual): replace it.
    JsonObjectView body;
    if (body.scan(original) != JsonScanStatus::Ok) {
        std::string out = "{\"";
        out.append(kKvKey).append("\":").append(handle).push_back('}');
        return out;
    }
    return body.rewrite({{kKvKey, handle, JsonEdit::Op::Set}});
}

std::string make_plain_decode_body(std::string_view original) {
    if (original.find(kKvKey) == std::string_view::npos) {
        return std::string(original);
    }
    JsonObjectView body;
    if (body.scan(original) != JsonScanStatus::Ok || body.find(kKvKey) == nullptr) {
        return std::string(original);
    }
    return body.rewrite({{kKvKey, {}, JsonEdit::Op::Erase}});
}

HandleStatus parse_kv_handle(std::string_view prefill_answer, KvHandle& out) {
    // Only kv_transfer_params is needed from P's (often long) answer: the scan validates the
    // whole text (same verdicts as a full parse, depth and member limits included; the last of
    // duplicate keys wins) and keeps the handle's bytes as they are.
    JsonObjectView answer;
    JsonObjectView params;  // kv_transfer_params' members, from the same pass
    if (answer.scan(prefill_answer, kKvKey, params) != JsonScanStatus::Ok) {
        return HandleStatus::NotJson;
    }
    const JsonMember* kv = answer.find(kKvKey);
    if (kv == nullptr || kv->kind != JsonKind::Object || params.members().empty()) {
        return HandleStatus::Missing;
    }
    out.params.assign(kv->value);
    out.remote_request_id.clear();
    const JsonMember* rid = params.find("remote_request_id");
    if (rid != nullptr && rid->kind == JsonKind::String) {
        out.remote_request_id = json_string(rid->value);
    }
    out.transfer_mode.clear();
    const JsonMember* mode = params.find("transfer_mode");
    if (mode != nullptr && mode->kind == JsonKind::String) {
        out.transfer_mode = json_string(mode->value);
    }
    return HandleStatus::Ok;
}

bool is_loopback_or_wildcard_host(std::string_view host) {
    host = ascii::trim(host);
    if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
        host = host.substr(1, host.size() - 2);
    }
    if (host.empty()) {
        return true;
    }
    const std::string lower = ascii::lower(host);
    constexpr std::string_view kLocal = "localhost";
    if (lower == kLocal || lower == "localhost." ||
        (lower.size() > kLocal.size() + 1 && lower.ends_with(".localhost"))) {
        return true;
    }
    boost::system::error_code ec;
    const auto addr = boost::asio::ip::make_address(lower, ec);
    if (ec) {
        return false;
    }
    if (addr.is_v6() && addr.to_v6().is_v4_mapped()) {
        const auto v4 = boost::asio::ip::make_address_v4(boost::asio::ip::v4_mapped, addr.to_v6());
        return v4.is_loopback() || v4.is_unspecified();
    }
    return addr.is_loopback() || addr.is_unspecified();
}

bool rewrite_kv_host(std::string& params, std::string_view p_host, bool always) {
    JsonObjectView view;
    if (view.scan(params) != JsonScanStatus::Ok) {
        return false;
    }
    const JsonMember* host = view.find("remote_host");
    if (!always) {
        if (host == nullptr || host->kind != JsonKind::String ||
            !is_loopback_or_wildcard_host(json_string(host->value))) {
            return false;
        }
    }
    const std::string value = dump(Json(std::string(p_host)));
    if (host != nullptr && host->value == value) {
        return false;
    }
    params = view.rewrite({{"remote_host", value, JsonEdit::Op::Set}});
    return true;
}

bool strip_kv_params(std::string& text) {
    if (text.find(kKvKey) == std::string::npos) {
        return false;
    }
    JsonObjectView view;
    if (view.scan(text) != JsonScanStatus::Ok || view.find(kKvKey) == nullptr) {
        return false;
    }
    text = view.rewrite({{kKvKey, {}, JsonEdit::Op::Erase}});
    return true;
}

bool strip_kv_params_events(std::string& events) {
    if (events.find(kKvKey) == std::string::npos) {
        return false;
    }
    std::string out;
    out.reserve(events.size());
    bool changed = false;
    const std::string_view all(events);
    SseLineEnds line_ends(all);
    std::string payload;
    for (std::size_t at = 0; at < all.size();) {
        const std::size_t eol = line_ends.next(at);
        const std::string_view line = all.substr(at, eol - at);
        std::size_t data = 0;
        if (line.starts_with("data:") && line.find(kKvKey) != std::string_view::npos) {
            data = line.size() > 5 && line[5] == ' ' ? 6 : 5;
            payload.assign(line.substr(data));
        }
        if (data != 0 && strip_kv_params(payload)) {
            out.append(line.substr(0, data)).append(payload);
            changed = true;
        } else {
            out.append(line);
        }
        if (eol < all.size()) {
            out.push_back(all[eol]);
        }
        at = eol + 1;
    }
    if (changed) {
        events.swap(out);
    }
    return changed;
}

bool is_json_content_type(std::string_view value) noexcept {
    auto semi = value.find(';');
    std::string_view media = ascii::trim(value.substr(0, semi));
    return ascii::iequals(media, "application/json");
}

}  // namespace pdr::disagg
