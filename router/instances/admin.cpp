// Admin operations (PROTOCOLS.md §6): add/remove instances at run time, and the start-up
// model probe. Authentication is the api layer's job; these only validate and act.
#include <nlohmann/json.hpp>

#include "config/ascii.hpp"
#include "net/common/error.hpp"
#include "net/common/log.hpp"
#include "net/common/shared_state.hpp"
#include "router/instances/registry.hpp"

namespace pdr::instances {

namespace {
constexpr std::string_view kLog = "instances";

std::string message_body(const std::string& message) {
    return nlohmann::json{{"message", message}}.dump(-1, ' ', false,
                                                     nlohmann::json::error_handler_t::replace);
}

std::string quoted_list(const std::vector<std::string>& models) {
    if (models.empty()) {
        return "no model";
    }
    std::string out = models.size() == 1 ? "model " : "models ";
    for (std::size_t i = 0; i < models.size(); ++i) {
        if (i > 0) {
            out += ", ";
        }
        out += "'" + models[i] + "'";
    }
    return out;
}

bool serves(const std::vector<std::string>& models, std::string_view wanted) {
    for (const auto& m : models) {
        if (model_matches(m, wanted)) {
            return true;
        }
    }
    return false;
}
}  // namespace

Registry::AdminResult Registry::admin_result(std::string_view action, std::string_view result,
                                             unsigned status, std::string body) {
    metrics_.admin_request(action, result);
    return AdminResult{status, std::move(body)};
}

std::optional<Registry::AdminResult> Registry::parse_admin_target(std::string_view action,
                                                                  const std::string& type,
                                                                  const std::string& instance,
                                                                  Role& role,
                                                                  config::InstanceAddress& addr) {
    if (!parse_role(type, role)) {
        return admin_result(
            action, "bad_request", 400,
            openai_error_body(Errc::InvalidField, "Invalid instance type.", "type"));
    }
    std::string why;
    if (!config::parse_instance_address(instance, addr, why)) {
        // Quoted back in part (log::clip): an answer the size of a hostile body helps nobody.
        return admin_result(
            action, "bad_request", 400,
            openai_error_body(Errc::InvalidField,
                              "Invalid instance '" + log::clip(instance) + "': " + why + ".",
                              "instance"));
    }
    return std::nullopt;
}

awaitable<Registry::AdminResult> Registry::add(std::string_view type_in,
                                               std::string_view instance_in, InstanceKv kv) {
    const std::string type(type_in), instance(instance_in);
    Role role{};
    config::InstanceAddress addr;
    if (auto bad = parse_admin_target("add", type, instance, role, addr)) {
        co_return std::move(*bad);
    }
    const std::string name = addr.text();
    if (is_self(addr)) {
        PDR_WARN(kLog, "admin add of " + type + " instance " + name +
                           " refused: it is this router's own listen address");
        co_return admin_result(
            "add", "bad_request", 400,
            openai_error_body(Errc::InvalidField,
                              "Instance " + name +
                                  " is this router's own listen address: a request sent there "
                                  "would come back to the router (a loop).",
                              "instance"));
    }
    if (find(role, name)) {
        co_return admin_result("add", "conflict", 409,
                               openai_error_body(Errc::Conflict, "Instance already exists."));
    }

    const TaskGroup::Alive alive = tasks_.alive();
    upstream::Endpoint ep{addr.host, addr.port};
    // An address outside --instance-allow never sees the upstream key, not even in the probe.
    const bool with_key = config::allow_matches(cfg_.instance_allow, addr.host);
    const auto probe = co_await probe_models(ep, with_key);
    if (!alive) {
        co_return AdminResult{503, openai_error_body(Errc::ShuttingDown, "Shutting down.")};
    }
    if (!probe.ok) {
        PDR_WARN(kLog, "admin add of " + type + " instance " + name + " failed: " + probe.error);
        co_return admin_result("add", "probe_failed", 502,
                               openai_error_body(probe.errc, "Instance validation failed: " + name +
                                                                 ": " + probe.error + "."));
    }
    if (!cfg_.model.empty() && !serves(probe.models, cfg_.model)) {
        const std::string msg = "Instance validation failed: " + name + " serves " +
                                quoted_list(probe.models) + " but the router serves model '" +
                                cfg_.model + "'.";
        PDR_WARN(kLog, msg);
        co_return admin_result("add", "probe_failed", 400,
                               openai_error_body(Errc::InvalidField, msg, "instance"));
    }
    if (find(role, name)) {  // added by a concurrent request meanwhile
        co_return admin_result("add", "conflict", 409,
                               openai_error_body(Errc::Conflict, "Instance already exists."));
    }

    InstancePtr added = insert(role, addr, std::move(kv));
    added->source = "admin";
    added->upstream_key = with_key;
    PDR_INFO(kLog, "added " + type + " instance " + name);
    if (!with_key && !cfg_.upstream_api_key.empty()) {
        PDR_WARN(kLog, type + " instance " + name +
                           " is not in --instance-allow: requests and probes to it carry no "
                           "--upstream-api-key");
    }
    co_return admin_result("add", "ok", 200,
                           message_body("Added " + name + " to " + type + "_instances."));
}

void Registry::set_self(std::string router_id, std::string listen_host, unsigned short port) {
    SharedLock lock;
    router_id_ = std::move(router_id);
    listen_host_ = std::move(listen_host);
    listen_port_ = port;
}

bool Registry::is_self(const config::InstanceAddress& a) const {
    SharedLock lock;
    if (listen_port_ == 0 || a.port != listen_port_) {
        return false;
    }
    if (ascii::iequals(a.host, listen_host_) || ascii::iequals(a.host, "localhost")) {
        return true;
    }
    error_code ec;
    const auto host = net::ip::make_address(a.host, ec);
    if (ec) {
        return false;  // another name: the hop header catches a loop through it
    }
    const auto listen = net::ip::make_address(listen_host_, ec);
    if (ec) {
        return false;
    }
    // Connecting to 0.0.0.0 (or ::) reaches the local host; listening on it takes every address.
    if (host == listen || (host.is_unspecified() && listen.is_loopback())) {
        return true;
    }
    return listen.is_unspecified() && (host.is_loopback() || host.is_unspecified());
}

Registry::AdminResult Registry::remove(std::string_view type_in, std::string_view instance_in) {
    SharedLock lock;
    const std::string type(type_in), instance(instance_in);
    Role role{};
    config::InstanceAddress addr;
    if (auto bad = parse_admin_target("remove", type, instance, role, addr)) {
        return std::move(*bad);
    }
    const std::string name = addr.text();
    auto inst = find(role, name);
    if (!inst) {
        return admin_result(
            "remove", "not_found", 404,
            openai_error_body(Errc::NotFound,
                              "Instance " + name + " not found in " + type + "_instances."));
    }
    PDR_INFO(kLog, "removed " + type + " instance " + name + " (" +
                       std::to_string(inst->in_flight) + " request(s) still in flight)");
    retire(inst);
    return admin_result("remove", "ok", 200,
                        message_body("Removed " + name + " from " + type + "_instances."));
}

void Registry::retire(const InstancePtr& inst) {
    inst->removed = true;
    inst->on_drained = [this, alive = tasks_.alive()] {
        if (alive) {
            wake_health_loop();  // the loop prunes it at once
        }
    };
    prune(inst->role);
    update_counts(inst->role);
}

awaitable<bool> Registry::add_discovered(Role role, config::InstanceAddress a, std::string source) {
    const std::string name = a.text();
    const std::string who = std::string(to_string(role)) + " instance " + name;
    if (find(role, name)) {
        co_return true;
    }
    if (is_self(a)) {
        PDR_WARN(kLog, who + " from " + source + " skipped: it is this router's own address");
        co_return false;
    }
    const TaskGroup::Alive alive = tasks_.alive();
    upstream::Endpoint ep{a.host, a.port};  // not a temporary in the co_await (GCC 12)
    const auto probe = co_await probe_models(ep);
    if (!alive) {
        co_return false;
    }
    if (!probe.ok) {
        PDR_WARN(kLog, who + " from " + source +
                           " not added (tried again at the next refresh): " + probe.error);
        co_return false;
    }
    if (!cfg_.model.empty() && !serves(probe.models, cfg_.model)) {
        PDR_WARN(kLog, who + " from " + source + " not added: it serves " +
                           quoted_list(probe.models) + ", not the configured model '" + cfg_.model +
                           "'");
        co_return false;
    }
    if (find(role, name)) {  // listed meanwhile
        co_return true;
    }
    insert(role, a, InstanceKv{})->source = std::move(source);
    PDR_INFO(kLog, "added " + who + " (discovered)");
    co_return true;
}

void Registry::drain(Role role, std::string_view name) {
    SharedLock lock;
    if (auto inst = find(role, name)) {
        PDR_INFO(kLog, "draining " + std::string(to_string(role)) + " instance " + inst->name +
                           ", gone from " + inst->source + " (" + std::to_string(inst->in_flight) +
                           " request(s) still in flight)");
        retire(inst);
    }
}

awaitable<bool> Registry::probe_all_at_startup() {
    if (cfg_.model.empty()) {
        co_return true;
    }
    bool ok = true;
    const TaskGroup::Alive alive = tasks_.alive();
    for (auto role : {Role::Prefill, Role::Decode}) {
        for (const auto& inst : list(role)) {
            const auto probe = co_await probe_models(inst->endpoint);
            if (!alive) {
                co_return false;
            }
            const std::string who = std::string(to_string(role)) + " instance " + inst->name;
            if (!probe.ok) {
                PDR_WARN(kLog, who + " not reachable at start-up (kept, tried until it fails): " +
                                   probe.error);
            } else if (!serves(probe.models, cfg_.model)) {
                PDR_ERROR(kLog, who + " serves " + quoted_list(probe.models) +
                                    ", not the configured model '" + cfg_.model + "'");
                ok = false;
            }
        }
    }
    co_return ok;
}

}  // namespace pdr::instances
