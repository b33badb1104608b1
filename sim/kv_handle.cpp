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

std::string hex64(std::uint64_t v) {
    static constexpr char kDigits[] = "0123456789abcdef";
    std::string s(16, '0');
    for (int i = 15; i >= 0; --i, v >>= 4) {
        s[static_cast<std::size_t>(i)] = kDigits[v & 0xf];
    }
    return s;
}

bool parse_hex64(const std::string& s, std::uint64_t& out) {
    if (s.empty() || s.size() > 16) {
        return false;
    }
    out = 0;
    for (char c : s) {
        const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (d < 0) {
            return false;
        }
        out = out << 4 | static_cast<std::uint64_t>(d);
    }
    return true;
}

}  // namespace

json kv_handle_json(const KvHandle& h) {
    json j{{"do_remote_prefill", true},
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
    if (h.agent_instance != 0) {
        j["pdx_instance"] = hex64(h.agent_instance);
        j["pdx_layout"] = h.layout;
    }
    return j;
}

json push_answer_json(const KvHandle& h, const std::string& transfer_id) {
    return json{{"transfer_mode", "push"},
                {"do_remote_prefill", true},
                {"do_remote_decode", false},
                {"remote_engine_id", h.engine_id},
                {"remote_request_id", h.request_id},
                {"remote_host", h.host},
                {"remote_port", h.port},
                {"tp_size", 1},
                {"pp_size", 1},
                {"transfer_id", transfer_id},
                {"remote_num_tokens", h.num_tokens}};
}

std::string string_param(const json& params, const char* key) {
    return params.is_object() && non_empty_string(params, key) ? params[key].get<std::string>()
                                                               : std::string();
}

bool is_push_params(const json& params) {
    return params.is_object() && params.contains("transfer_id") &&
           !params.contains("remote_block_ids");
}

std::optional<std::string> parse_push_params(const json& params, PushParams& out) {
    out = PushParams{};
    auto drp = params.find("do_remote_prefill");
    if (drp == params.end() || !drp->is_boolean() || !drp->get<bool>()) {
        return "kv_transfer_params.do_remote_prefill is not true";
    }
    for (const char* key :
         {"remote_engine_id", "remote_request_id", "remote_host", "transfer_id"}) {
        if (!non_empty_string(params, key)) {
            return std::string("kv_transfer_params.") + key + " is missing or not a string";
        }
    }
    auto port = params.find("remote_port");
    if (port == params.end() || !is_int(*port) || port->get<std::int64_t>() < 1 ||
        port->get<std::int64_t>() > 65535) {
        return "kv_transfer_params.remote_port is missing or not a valid port";
    }
    out.engine_id = params["remote_engine_id"].get<std::string>();
    out.request_id = params["remote_request_id"].get<std::string>();
    out.host = params["remote_host"].get<std::string>();
    out.port = static_cast<unsigned short>(port->get<std::int64_t>());
    out.transfer_id = params["transfer_id"].get<std::string>();
    return std::nullopt;
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
    if (auto inst = params.find("pdx_instance"); inst != params.end()) {
        if (!inst->is_string() || !parse_hex64(inst->get<std::string>(), out.agent_instance)) {
            return "kv_transfer_params.pdx_instance is not 16 hex digits";
        }
    }
    if (auto l = params.find("pdx_layout"); l != params.end()) {
        if (!l->is_number_unsigned() || l->get<std::uint64_t>() > 0xffffffffULL) {
            return "kv_transfer_params.pdx_layout is not a layout id";
        }
        out.layout = l->get<std::uint32_t>();
    }
    return std::nullopt;
}

namespace {

// The rules both modes' prefill legs share.
void check_prefill_common(const json& body, bool has_request_id, std::vector<std::string>& v) {
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
    if (!has_request_id) {
        v.push_back("prefill request: no X-Request-Id header");
    }
}

bool flag_is_true(const json& obj, const char* key) {
    auto it = obj.find(key);
    return it != obj.end() && it->is_boolean() && it->get<bool>();
}

std::optional<std::string> read_ports(const json& spec, const char* key,
                                      std::vector<unsigned short>& out) {
    auto it = spec.find(key);
    if (it == spec.end() || !it->is_array() || it->empty() || it->size() > 64) {
        return std::string("kv_transfer_params.disagg_spec.") + key +
               " must be a list of 1-64 ports";
    }
    for (const auto& p : *it) {
        if (!p.is_number_unsigned() || p.get<std::uint64_t>() < 1 ||
            p.get<std::uint64_t>() > 65535) {
            return std::string("kv_transfer_params.disagg_spec.") + key + " holds " + p.dump() +
                   ", not a port";
        }
        out.push_back(p.get<unsigned short>());
    }
    return std::nullopt;
}

}  // namespace

std::vector<std::string> check_prefill_request(const json& body, bool has_request_id) {
    std::vector<std::string> v;
    check_prefill_common(body, has_request_id, v);
    auto kv = body.find("kv_transfer_params");
    if (kv == body.end() || !kv->is_object() || !flag_is_true(*kv, "do_remote_decode")) {
        v.push_back("prefill request: kv_transfer_params.do_remote_decode is not true");
    }
    return v;
}

std::optional<std::string> parse_lmcache_params(const json& params, LmcacheParams& out) {
    out = LmcacheParams{};
    if (!params.is_object()) {
        return "kv_transfer_params is not an object";
    }
    if (auto r = params.find("ret_first_tok"); r != params.end() && !r->is_null()) {
        if (!r->is_boolean()) {
            return "kv_transfer_params.ret_first_tok must be a boolean";
        }
        out.ret_first_tok = r->get<bool>();
    }
    auto it = params.find("disagg_spec");
    if (it == params.end() || it->is_null()) {
        return std::nullopt;
    }
    if (!it->is_object()) {
        return "kv_transfer_params.disagg_spec must be an object";
    }
    DisaggSpec spec;
    for (const char* key : {"req_id", "receiver_host"}) {
        if (!non_empty_string(*it, key)) {
            return std::string("kv_transfer_params.disagg_spec.") + key +
                   " is missing or not a string";
        }
    }
    spec.req_id = (*it)["req_id"].get<std::string>();
    spec.receiver_host = (*it)["receiver_host"].get<std::string>();
    if (auto e = read_ports(*it, "receiver_init_port", spec.init_ports)) {
        return e;
    }
    if (auto e = read_ports(*it, "receiver_alloc_port", spec.alloc_ports)) {
        return e;
    }
    if (spec.init_ports.size() != spec.alloc_ports.size()) {
        return "kv_transfer_params.disagg_spec: receiver_init_port and receiver_alloc_port "
               "differ in length (one port each per decode TP rank)";
    }
    out.spec = std::move(spec);
    return std::nullopt;
}

std::vector<std::string> check_lmcache_prefill_request(const json& body,
                                                       const std::string& request_id) {
    std::vector<std::string> v;
    check_prefill_common(body, !request_id.empty(), v);
    auto prompt = body.find("prompt");
    if (prompt == body.end() || !prompt->is_array() || prompt->empty() || !is_int((*prompt)[0])) {
        v.push_back("lmcache prefill request: 'prompt' is not a list of token ids");
    }
    auto kv = body.find("kv_transfer_params");
    if (kv == body.end() || !kv->is_object() || !flag_is_true(*kv, "ret_first_tok")) {
        v.push_back("lmcache prefill request: kv_transfer_params.ret_first_tok is not true");
    }
    // disagg_spec.req_id is the router's own random id, not the request id: LMCache treats it
    // as opaque (it only has to match the notifications), and the router keeps it unguessable.
    return v;
}

}  // namespace pdr::sim
