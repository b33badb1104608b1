#include "router/api/admin.hpp"

#include "config/ascii.hpp"

#include "net/common/log.hpp"
#include "net/common/log_limit.hpp"
#include "net/common/shared_state.hpp"
#include "router/api/validate.hpp"
#include "router/disagg/flow.hpp"
#include "router/kv/lease_keeper.hpp"

#include <algorithm>
#include <cctype>

namespace pdr::api {

namespace {

std::string_view action_name(AdminAction a) noexcept {
    switch (a) {
        case AdminAction::Add:
            return "add";
        case AdminAction::Remove:
            return "remove";
        case AdminAction::List:
            break;
    }
    return "list";
}

// "Bearer <token>" (scheme case-insensitive) → token; anything else → empty.
std::string_view bearer_token(std::string_view v) noexcept {
    constexpr std::string_view kScheme = "bearer ";
    if (v.size() <= kScheme.size() || !ascii::istarts_with(v, kScheme)) {
        return {};
    }
    v.remove_prefix(kScheme.size());
    while (!v.empty() && v.front() == ' ') {
        v.remove_prefix(1);
    }
    return v;
}

// A port list field of an add body: a list of 1..65535 integers (one per TP rank), or a
// "8300,8301" string as the flag takes it.
ValidationError port_list(const disagg::Json& body, const char* key,
                          std::vector<unsigned short>& out) {
    auto it = body.find(key);
    if (it == body.end() || it->is_null()) {
        return {};
    }
    const ValidationError bad{
        Errc::InvalidField,
        std::string("\"") + key + "\" must be a list of ports 1..65535, one per decode TP rank",
        key};
    if (it->is_string()) {
        std::string why;
        if (!config::parse_port_list(it->get<std::string>(), out, why)) {
            return bad;
        }
        return {};
    }
    if (!it->is_array() || it->empty() || it->size() > config::kMaxTpRanks) {
        return bad;
    }
    for (const auto& p : *it) {
        if (!p.is_number_integer() || p.get<std::int64_t>() < 1 || p.get<std::int64_t>() > 65535) {
            return bad;
        }
        out.push_back(static_cast<unsigned short>(p.get<std::int64_t>()));
    }
    return {};
}

// The optional per-instance KV fields of POST /instances/add (PROTOCOLS.md §6):
// lmcache_init_ports, lmcache_alloc_ports, lmcache_receiver_host, kv_ready_expected.
ValidationError parse_instance_kv(const disagg::Json& body, instances::InstanceKv& kv) {
    if (auto e = port_list(body, "lmcache_init_ports", kv.lmcache.init_ports); !e.ok()) {
        return e;
    }
    if (auto e = port_list(body, "lmcache_alloc_ports", kv.lmcache.alloc_ports); !e.ok()) {
        return e;
    }
    if (kv.lmcache.init_ports.size() != kv.lmcache.alloc_ports.size()) {
        return {Errc::InvalidField,
                "\"lmcache_init_ports\" and \"lmcache_alloc_ports\" must have one port per "
                "decode TP rank each (the same count)",
                "lmcache_alloc_ports"};
    }
    if (auto it = body.find("lmcache_receiver_host"); it != body.end() && !it->is_null()) {
        config::InstanceAddress a;
        std::string why;
        if (!it->is_string() ||
            !config::parse_instance_address((it->get<std::string>().find(':') != std::string::npos
                                                 ? "[" + it->get<std::string>() + "]"
                                                 : it->get<std::string>()) +
                                                ":1",
                                            a, why)) {
            return {Errc::InvalidField, "\"lmcache_receiver_host\" must be a host name or address",
                    "lmcache_receiver_host"};
        }
        kv.lmcache.host = a.host;
    }
    if (auto it = body.find("kv_ready_expected"); it != body.end() && !it->is_null()) {
        if (!it->is_number_integer() || it->get<std::int64_t>() < 0 ||
            it->get<std::int64_t>() > static_cast<std::int64_t>(config::kMaxTpRanks)) {
            return {Errc::InvalidField,
                    "\"kv_ready_expected\" must be an integer 0.." +
                        std::to_string(config::kMaxTpRanks),
                    "kv_ready_expected"};
        }
        kv.kv_ready_expected = static_cast<int>(it->get<std::int64_t>());
    }
    return {};
}

// Push mode's per-prefill fields of POST /instances/add (PROTOCOLS.md §4): engine_id (required
// for a prefill in push mode), kv_host, side_channel_port, tp_size, pp_size.
ValidationError parse_push_kv(const disagg::Json& body, bool prefill_in_push_mode,
                              instances::InstanceKv& kv) {
    static constexpr std::string_view kFields[] = {"engine_id", "kv_host", "side_channel_port",
                                                   "tp_size", "pp_size"};
    if (!prefill_in_push_mode) {
        for (std::string_view f : kFields) {
            if (auto it = body.find(f); it != body.end() && !it->is_null()) {
                return {Errc::InvalidField,
                        "\"" + std::string(f) +
                            "\" is a push-mode prefill field (--kv-mode push, type prefill)",
                        std::string(f)};
            }
        }
        return {};
    }
    auto it = body.find("engine_id");
    if (it == body.end() || it->is_null()) {
        return {Errc::MissingField,
                "\"engine_id\" is required for a prefill instance in push mode (P's "
                "--kv-transfer-config engine_id)",
                "engine_id"};
    }
    std::string why = it->is_string() ? config::check_engine_id(it->get<std::string>())
                                      : std::string("must be a string");
    if (!why.empty()) {
        return {Errc::InvalidField, "\"engine_id\": " + why, "engine_id"};
    }
    kv.push.engine_id = it->get<std::string>();
    if (auto h = body.find("kv_host"); h != body.end() && !h->is_null()) {
        config::InstanceAddress a;
        std::string error;
        const std::string host = h->is_string() ? h->get<std::string>() : std::string();
        const std::string text =
            host.find(':') != std::string::npos ? "[" + host + "]:1" : host + ":1";
        if (host.empty() || !config::parse_instance_address(text, a, error)) {
            return {Errc::InvalidField, "\"kv_host\" must be a host name or address", "kv_host"};
        }
        kv.push.kv_host = a.host;
    }
    struct IntField {
        std::string_view name;
        std::int64_t max;
    };
    static constexpr IntField kInts[] = {
        {"side_channel_port", 65535}, {"tp_size", 1024}, {"pp_size", 1024}};
    for (const IntField& f : kInts) {
        auto v = body.find(f.name);
        if (v == body.end() || v->is_null()) {
            continue;
        }
        if (!v->is_number_integer() || v->get<std::int64_t>() < 1 ||
            v->get<std::int64_t>() > f.max) {
            return {
                Errc::InvalidField,
                "\"" + std::string(f.name) + "\" must be an integer 1.." + std::to_string(f.max),
                std::string(f.name)};
        }
        const auto n = v->get<std::int64_t>();
        if (f.name == "side_channel_port") {
            kv.push.side_channel_port = static_cast<unsigned short>(n);
        } else if (f.name == "tp_size") {
            kv.push.tp_size = static_cast<int>(n);
        } else {
            kv.push.pp_size = static_cast<int>(n);
        }
    }
    return {};
}

}  // namespace

bool constant_time_equals(std::string_view a, std::string_view b) noexcept {
    const std::size_t n = std::max(a.size(), b.size());
    unsigned diff = a.size() == b.size() ? 0u : 1u;
    for (std::size_t i = 0; i < n; ++i) {
        const auto x = static_cast<unsigned char>(i < a.size() ? a[i] : 0);
        const auto y = static_cast<unsigned char>(i < b.size() ? b[i] : 0);
        diff |= static_cast<unsigned>(x ^ y);
    }
    return diff == 0;
}

AdminAuth check_admin_auth(const server::Request& req, std::string_view admin_key) noexcept {
    if (admin_key.empty()) {
        return AdminAuth::Disabled;
    }
    // X-API-Key decides when it carries a key; each of its fields must then be the key (two
    // that differ are refused whatever their order). An empty one presents nothing, and
    // Authorization: Bearer is asked instead (Authorization alone may carry a client's own
    // API key, so it is not asked when X-API-Key has one).
    auto verdict = [&](auto range, auto key_of) {
        bool presented = false;
        bool all_match = true;
        for (; range.first != range.second; ++range.first) {
            const std::string_view key = key_of(range.first->value());
            if (!key.empty()) {
                presented = true;
                all_match = constant_time_equals(key, admin_key) && all_match;
            }
        }
        return !presented ? AdminAuth::Missing : all_match ? AdminAuth::Ok : AdminAuth::Wrong;
    };
    const AdminAuth by_key =
        verdict(req.equal_range("X-API-Key"), [](std::string_view v) { return v; });
    if (by_key != AdminAuth::Missing) {
        return by_key;
    }
    return verdict(req.equal_range(http::field::authorization), bearer_token);
}

// A failed admin authentication: one WARN line per second (what was tried, from where).
void log_admin_refused(const server::Exchange& ex, std::string_view action, std::string_view why) {
    static LogLimiter limiter;
    std::string note;
    if (limiter.allow("admin_auth", note)) {
        PDR_WARN("admin", "admin authentication failed: " + std::string(why) + " on " +
                              std::string(action) + " from client=" + ex.remote_address() + note);
    }
}

awaitable<bool> admit_admin(server::Exchange& ex, std::string_view action,
                            metrics::RouterMetrics& metrics, std::string_view admin_key) {
    switch (check_admin_auth(ex.request(), admin_key)) {
        case AdminAuth::Ok:
            co_return true;
        case AdminAuth::Disabled:
            metrics.admin_request(action, "forbidden");
            co_await server::respond_error(
                ex, Errc::Forbidden,
                "admin routes are disabled: no admin API key is configured "
                "(--admin-api-key or ADMIN_API_KEY)");
            co_return false;
        case AdminAuth::Missing:
            metrics.admin_request(action, "unauthorized");
            log_admin_refused(ex, action, "no key");
            co_await server::respond_error(
                ex, Errc::Unauthorized,
                "missing admin API key (send X-API-Key or Authorization: Bearer)");
            co_return false;
        case AdminAuth::Wrong:
            metrics.admin_request(action, "forbidden");
            log_admin_refused(ex, action, "wrong key");
            co_await server::respond_error(ex, Errc::Forbidden, "invalid admin API key");
            co_return false;
    }
    co_return false;
}

awaitable<void> handle_admin(server::Exchange& ex, AdminAction action,
                             instances::Registry& registry, metrics::RouterMetrics& metrics,
                             std::string_view admin_key, config::KvMode mode,
                             const kv::LeaseKeeper* leases) {
    const std::string_view name = action_name(action);
    const bool admitted = co_await admit_admin(ex, name, metrics, admin_key);
    if (!admitted) {
        co_return;
    }
    if (action == AdminAction::List) {
        metrics.admin_request(name, "ok");
        nlohmann::json list = registry.to_json();
        if (leases != nullptr) {
            for (auto& entry : list) {
                if (entry["role"] == "prefill") {
                    entry["lease_refresh"] =
                        kv::LeaseKeeper::to_string(leases->route(entry["name"].get<std::string>()));
                }
            }
        }
        co_await server::respond_relayed(
            ex, 200, "application/json",
            list.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
        co_return;
    }
    disagg::Json body;
    ValidationError err = parse_object(ex.request().body(), body);
    const disagg::Json* type = nullptr;
    const disagg::Json* instance = nullptr;
    if (err.ok()) {
        auto t = body.find("type");
        auto i = body.find("instance");
        type = t == body.end() ? nullptr : &*t;
        instance = i == body.end() ? nullptr : &*i;
        if (type == nullptr || !type->is_string()) {
            err = {type == nullptr ? Errc::MissingField : Errc::InvalidField,
                   "\"type\" must be \"prefill\" or \"decode\"", "type"};
        } else if (instance == nullptr || !instance->is_string()) {
            err = {instance == nullptr ? Errc::MissingField : Errc::InvalidField,
                   "\"instance\" must be a \"host:port\" string", "instance"};
        }
    }
    if (!err.ok()) {
        metrics.admin_request(name, "bad_request");
        co_await server::respond_error(ex, err.errc, err.message, err.param);
        co_return;
    }
    const std::string type_s = type->get<std::string>();
    const std::string instance_s = instance->get<std::string>();
    instances::InstanceKv kv;
    if (action == AdminAction::Add) {
        err = parse_instance_kv(body, kv);
        if (err.ok()) {
            err = parse_push_kv(body, mode == config::KvMode::Push && type_s == "prefill", kv);
        }
        if (!err.ok()) {
            metrics.admin_request(name, "bad_request");
            co_await server::respond_error(ex, err.errc, err.message, err.param);
            co_return;
        }
    }
    instances::Registry::AdminResult result;
    if (action == AdminAction::Add) {
        // The registry is shared: its add (a probe, then the insert) runs on the control
        // executor.
        auto add = on_control(registry.executor(), registry.add(type_s, instance_s, std::move(kv)));
        result = co_await std::move(add);
    } else {
        result = registry.remove(type_s, instance_s);
    }
    PDR_INFO("admin", std::string(name) + " " + log::clip(type_s) + " " + log::clip(instance_s) +
                          " -> " + std::to_string(result.status));
    co_await server::respond_relayed(ex, result.status, "application/json", std::move(result.body));
}

}  // namespace pdr::api
