#include "sim/kv_handle.hpp"

namespace pdr::sim {

namespace {

using nlohmann::json;

bool non_empty_string(const json& obj, const char* key) {
    auto it = obj.find(key);
    return it != obj.end() && it->is_string() && !it->get_ref<const std::string&>().empty();
}

bool is_int(const json& v) {
    return v.is_number_integer() || v.is_number_unsigned();
}

bool is_exactly_one(const json& body, const char* key) {
    auto it = body.find(key);
    return it != body.end() && is_int(*it) && it->get<std::int64_t>() == 1;
}

}  // namespace

json kv_handle_json(const KvHandle& h) {
    return json{{"do_remote_prefill", true},
                {"do_remote_decode", false},
                {"remote_block_ids", h.block_ids},
                {"remote_engine_id", h.engine_id},
                {"remote_request_id", h.request_id},
                {"remote_host", h.host},
                {"remote_port", h.port},
                {"tp_size", 1},
                {"pp_size", 1},
                {"remote_num_tokens", h.num_tokens},
                {"transfer_mode", "pull"}};
}

std::optional<std::string> parse_kv_handle(const json& params, KvHandle& out) {
    out = KvHandle{};
    if (!params.is_object()) {
        return "kv_transfer_params is not an object";
    }
    auto drp = params.find("do_remote_prefill");
    if (drp == params.end() || !drp->is_boolean() || !drp->get<bool>()) {
        return "kv_transfer_params.do_remote_prefill is not true";
    }
    for (const char* key : {"remote_engine_id", "remote_request_id", "remote_host"}) {
        if (!non_empty_string(params, key)) {
            return std::string("kv_transfer_params.") + key + " is missing or not a string";
        }
    }
    auto port = params.find("remote_port");
    if (port == params.end() || !is_int(*port) || port->get<std::int64_t>() < 1 ||
        port->get<std::int64_t>() > 65535) {
        return "kv_transfer_params.remote_port is missing or not a valid port";
    }
    auto blocks = params.find("remote_block_ids");
    if (blocks == params.end() || !blocks->is_array()) {
        return "kv_transfer_params.remote_block_ids is missing or not a list";
    }
    for (const auto& b : *blocks) {
        if (is_int(b)) {
            out.block_ids.push_back(b.get<std::int64_t>());
        } else if (b.is_array()) {  // one list per KV-cache group
            for (const auto& inner : b) {
                if (!is_int(inner)) {
                    return "kv_transfer_params.remote_block_ids holds a non-integer";
                }
                out.block_ids.push_back(inner.get<std::int64_t>());
            }
        } else {
            return "kv_transfer_params.remote_block_ids holds a non-integer";
        }
    }
    out.engine_id = params["remote_engine_id"].get<std::string>();
    out.request_id = params["remote_request_id"].get<std::string>();
    out.host = params["remote_host"].get<std::string>();
    out.port = static_cast<unsigned short>(port->get<std::int64_t>());
    if (auto n = params.find("remote_num_tokens"); n != params.end() && is_int(*n)) {
        out.num_tokens = static_cast<int>(n->get<std::int64_t>());
    }
    return std::nullopt;
}

std::vector<std::string> check_prefill_request(const json& body, bool has_request_id) {
    std::vector<std::string> v;
    auto stream = body.find("stream");
    if (stream == body.end() || !stream->is_boolean() || stream->get<bool>()) {
        v.push_back("prefill request: 'stream' is not false");
    }
    if (!is_exactly_one(body, "max_tokens")) {
        v.push_back("prefill request: 'max_tokens' is not 1");
    }
    if (body.contains("max_completion_tokens") && !is_exactly_one(body, "max_completion_tokens")) {
        v.push_back("prefill request: 'max_completion_tokens' is present and not 1");
    }
    for (const char* key : {"stream_options", "min_tokens", "min_completion_tokens"}) {
        if (body.contains(key)) {
            v.push_back(std::string("prefill request: '") + key + "' is present");
        }
    }
    auto kv = body.find("kv_transfer_params");
    bool drd = false;
    if (kv != body.end() && kv->is_object()) {
        auto d = kv->find("do_remote_decode");
        drd = d != kv->end() && d->is_boolean() && d->get<bool>();
    }
    if (!drd) {
        v.push_back("prefill request: kv_transfer_params.do_remote_decode is not true");
    }
    if (!has_request_id) {
        v.push_back("prefill request: no X-Request-Id header");
    }
    return v;
}

}  // namespace pdr::sim
