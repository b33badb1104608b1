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

// A list of ranks (integers 0-1023).
bool read_ranks(const json& obj, const char* key, std::vector<int>& out, std::string& error) {
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) {
        return true;
    }
    if (!it->is_array()) {
        error = std::string("'") + key + "' must be a list of ranks";
        return false;
    }
    for (const auto& r : *it) {
        if (!r.is_number_unsigned() || r.get<std::uint64_t>() > 1023) {
            error = std::string("'") + key + "' must hold ranks 0-1023";
            return false;
        }
        out.push_back(r.get<int>());
    }
    return true;
}

constexpr NotifGarbage kAllGarbage[] = {NotifGarbage::NotMsgpack, NotifGarbage::NonMap,
                                        NotifGarbage::NoReqId,    NotifGarbage::ReqIdNotString,
                                        NotifGarbage::Multipart,  NotifGarbage::Huge};

// `true` (every kind), one kind's name, or a list of names.
bool read_garbage(const json& obj, std::vector<NotifGarbage>& out, std::string& error) {
    auto it = obj.find("lmcache_notif_garbage");
    if (it == obj.end() || it->is_null() || (it->is_boolean() && !it->get<bool>())) {
        return true;
    }
    if (it->is_boolean()) {
        out.assign(std::begin(kAllGarbage), std::end(kAllGarbage));
        return true;
    }
    const json names = it->is_string() ? json::array({*it}) : *it;
    if (!names.is_array()) {
        error = "'lmcache_notif_garbage' must be true, a kind or a list of kinds";
        return false;
    }
    for (const auto& n : names) {
        bool found = false;
        for (auto g : kAllGarbage) {
            if (n.is_string() && n.get<std::string>() == to_string(g)) {
                out.push_back(g);
                found = true;
            }
        }
        if (!found) {
            error = "'lmcache_notif_garbage': unknown kind " + n.dump() +
                    " (not_msgpack, non_map, no_req_id, req_id_not_string, multipart, huge)";
            return false;
        }
    }
    return true;
}

bool read_lmcache(const json& obj, LmcacheFault& f, std::string& error) {
    return read_ranks(obj, "lmcache_drop_notif_ranks", f.drop_notif_ranks, error) &&
           read_ranks(obj, "lmcache_skip_kv_ranks", f.skip_kv_ranks, error) &&
           read_ranks(obj, "lmcache_corrupt_kv_ranks", f.corrupt_kv_ranks, error) &&
           read_int(obj, "lmcache_notif_delay_ms", f.notif_delay_ms, error) &&
           read_bool(obj, "lmcache_notif_early", f.notif_early, error) &&
           read_bool(obj, "lmcache_notif_duplicate", f.notif_duplicate, error) &&
           read_bool(obj, "lmcache_fail_after_notif", f.fail_after_notif, error) &&
           read_garbage(obj, f.notif_garbage, error);
}

}  // namespace

std::string_view to_string(NotifGarbage g) noexcept {
    switch (g) {
        case NotifGarbage::NotMsgpack:
            return "not_msgpack";
        case NotifGarbage::NonMap:
            return "non_map";
        case NotifGarbage::NoReqId:
            return "no_req_id";
        case NotifGarbage::ReqIdNotString:
            return "req_id_not_string";
        case NotifGarbage::Multipart:
            return "multipart";
        case NotifGarbage::Huge:
            return "huge";
    }
    return "?";
}

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
        !read_bool(obj, "close_delimited", f.close_delimited, error) ||
        !read_int(obj, "kv_write_delay_ms", f.kv_write_delay_ms, error) ||
        !read_int(obj, "kv_register_delay_ms", f.kv_register_delay_ms, error) ||
        !read_int(obj, "kv_hold_after_ms", f.kv_hold_after_ms, error) ||
        !read_bool(obj, "kv_corrupt_block", f.kv_corrupt_block, error) ||
        !read_bool(obj, "kv_answer_pull", f.kv_answer_pull, error) ||
        !read_bool(obj, "kv_answer_push", f.kv_answer_push, error) ||
        !read_bool(obj, "kv_failed_to_router_only", f.kv_failed_to_router_only, error) ||
        !read_lmcache(obj, f.lmcache, error)) {
        return error;
    }
    if (f.lmcache.notif_delay_ms < 0) {
        return "'lmcache_notif_delay_ms' must not be negative";
    }
    if (f.lmcache.notif_delay_ms > 0 && f.lmcache.notif_early) {
        return "'lmcache_notif_delay_ms' and 'lmcache_notif_early' exclude each other";
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
    if (f.kv_write_delay_ms < 0 || f.kv_register_delay_ms < 0 || f.kv_hold_after_ms < 0) {
        return "'kv_write_delay_ms', 'kv_register_delay_ms' and 'kv_hold_after_ms' must not be "
               "negative";
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
