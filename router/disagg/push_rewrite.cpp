#include "router/disagg/push_rewrite.hpp"

#include "net/common/uuid.hpp"
#include "router/disagg/rewrite.hpp"

namespace pdr::disagg {

namespace {

constexpr std::string_view kKvKey = "kv_transfer_params";

void append_member(std::string& out, std::string_view key, const Json& value) {
    out.append(",\"").append(key).append("\":").append(dump(value));
}

}  // namespace

std::string new_transfer_id() {
    return "xfer-" + make_uuid_v4();
}

std::string prefill_kv_request(std::string_view transfer_id, std::string_view control) {
    std::string out(kPrefillKvRequest.substr(0, kPrefillKvRequest.size() - 1));
    if (!transfer_id.empty()) {
        append_member(out, "transfer_id", Json(std::string(transfer_id)));
    }
    if (!control.empty()) {
        append_member(out, "pdx_control", Json(std::string(control)));
    }
    out.push_back('}');
    return out;
}

std::string push_decode_params(const config::PushCoords& p, std::string_view kv_host,
                               std::string_view request_id, std::string_view transfer_id) {
    Json j = Json::object();
    j["do_remote_decode"] = false;
    j["do_remote_prefill"] = true;
    j["remote_engine_id"] = p.engine_id;
    j["remote_host"] = std::string(kv_host);
    j["remote_port"] = p.side_channel_port;
    j["tp_size"] = p.tp_size;
    j["pp_size"] = p.pp_size;
    j["remote_request_id"] = std::string(request_id);
    j["transfer_id"] = std::string(transfer_id);
    return dump(j);
}

PushAnswer check_push_answer(std::string_view prefill_answer, std::string& mode) {
    JsonObjectView answer;
    JsonObjectView params;
    if (answer.scan(prefill_answer, kKvKey, params) != JsonScanStatus::Ok) {
        return PushAnswer::NotJson;
    }
    const JsonMember* kv = answer.find(kKvKey);
    const JsonMember* m =
        kv != nullptr && kv->kind == JsonKind::Object ? params.find("transfer_mode") : nullptr;
    if (m == nullptr) {
        mode = "missing";
        return PushAnswer::WrongMode;
    }
    mode = m->kind == JsonKind::String ? json_string(m->value) : std::string(m->value);
    return mode == "push" ? PushAnswer::Ok : PushAnswer::WrongMode;
}

}  // namespace pdr::disagg
