#include "sim/faults.hpp"
#include "net/common/json_limits.hpp"

#include "sim/openai.hpp"

#include <nlohmann/json.hpp>

namespace pdr::sim {

namespace {

using nlohmann::json;

bool read_int(const json& obj, const char* key, int& out, std::string& error) {
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) {
        return true;
    }
    if (!it->is_number_integer() && !it->is_number_unsigned()) {
        error = std::string("'") + key + "' must be an integer";
        return false;
    }
    auto v = it->get<std::int64_t>();
    if (v < -1 || v > 3'600'000) {
        error = std::string("'") + key + "' is out of range: " + std::to_string(v);
        return false;
    }
    out = static_cast<int>(v);
    return true;
}

bool read_bool(const json& obj, const char* key, bool& out, std::string& error) {
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) {
        return true;
    }
    if (!it->is_boolean()) {
        error = std::string("'") + key + "' must be a boolean";
        return false;
    }
    out = it->get<bool>();
    return true;
}

}  // namespace

std::optional<std::string> FaultPlan::set(std::string_view body) {
    json obj = parse_untrusted_json(body);
    if (obj.is_discarded() || !obj.is_object()) {
        return "fault body must be a JSON object";
    }
    Fault f;
    int count = 1;
    std::string error;
    if (!read_int(obj, "status", f.status, error) || !read_int(obj, "count", count, error) ||
        !read_int(obj, "close_after_chunks", f.close_after_chunks, error) ||
        !read_int(obj, "delay_ms", f.delay_ms, error) ||
        !read_int(obj, "token_delay_ms", f.token_delay_ms, error) ||
        !read_int(obj, "retry_after_s", f.retry_after_s, error) ||
        !read_int(obj, "split_first_event_ms", f.split_first_event_ms, error) ||
        !read_bool(obj, "close_before_response", f.close_before_response, error) ||
        !read_bool(obj, "omit_kv_params", f.omit_kv_params, error) ||
        !read_bool(obj, "cut_last_event", f.cut_last_event, error) ||
        !read_bool(obj, "close_delimited", f.close_delimited, error)) {
        return error;
    }
    if (f.status != 0 && (f.status < 100 || f.status > 599)) {
        return "'status' must be an HTTP status (100-599)";
    }
    if (f.cut_last_event && f.close_after_chunks < 1) {
        return "'cut_last_event' needs 'close_after_chunks' >= 1";
    }
    if (f.retry_after_s >= 0 && f.status == 0) {
        return "'retry_after_s' needs 'status'";
    }
    if (f.delay_ms < 0) {
        return "'delay_ms' must not be negative";
    }
    if (f.split_first_event_ms < 0) {
        return "'split_first_event_ms' must not be negative";
    }
    if (auto it = obj.find("body"); it != obj.end() && !it->is_null()) {
        if (!it->is_string()) {
            return "'body' must be a string";
        }
        f.body = it->get<std::string>();
    } else if (f.status != 0) {
        f.body = fault_error_body(f.status);
    }
    fault_ = std::move(f);
    remaining_ = count;
    return std::nullopt;
}

std::optional<Fault> FaultPlan::take() {
    if (remaining_ == 0) {
        return std::nullopt;
    }
    if (remaining_ > 0) {
        --remaining_;
    }
    return fault_;
}

}  // namespace pdr::sim
