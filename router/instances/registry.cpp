// Registry core: instance list, selection, in-flight accounting, health state transitions.
// Admin add/remove live in admin.cpp, the health loop and probes in health.cpp.
#include "router/instances/registry.hpp"

#include <algorithm>

#include "net/common/log.hpp"
#include "net/common/shared_state.hpp"

namespace pdr::instances {

namespace {
constexpr std::string_view kLog = "instances";

metrics::Role metrics_role(Role r) noexcept {
    return r == Role::Prefill ? metrics::Role::Prefill : metrics::Role::Decode;
}
std::size_t index(Role r) noexcept {
    return r == Role::Prefill ? 0 : 1;
}
}  // namespace

std::string_view to_string(Role r) noexcept {
    return r == Role::Prefill ? "prefill" : "decode";
}

bool parse_role(std::string_view s, Role& out) noexcept {
    if (s == "prefill") {
        out = Role::Prefill;
        return true;
    }
    if (s == "decode") {
        out = Role::Decode;
        return true;
    }
    return false;
}

InFlight::InFlight(InstancePtr inst, std::size_t weight)
    : inst_(std::move(inst)), weight_(std::max<std::size_t>(weight, 1)) {
    if (!inst_) {
        return;
    }
    SharedLock lock;
    ++inst_->in_flight;
    inst_->load += weight_;
    ++inst_->requests;
    if (inst_->in_flight_gauge != nullptr) {
        inst_->in_flight_gauge->Increment();
    }
    if (inst_->requests_counter != nullptr) {
        inst_->requests_counter->Increment();
    }
}

InFlight& InFlight::operator=(InFlight&& o) noexcept {
    SharedLock lock;
    if (this != &o) {
        release();
        inst_ = std::move(o.inst_);
        weight_ = o.weight_;
    }
    return *this;
}

void InFlight::release() noexcept {
    SharedLock lock;
    if (!inst_) {
        return;
    }
    if (inst_->in_flight > 0) {
        --inst_->in_flight;
    }
    inst_->load -= std::min(inst_->load, weight_);
    if (inst_->in_flight_gauge != nullptr) {
        inst_->in_flight_gauge->Decrement();
    }
    if (inst_->removed && inst_->in_flight == 0 && inst_->on_drained) {
        try {
            inst_->on_drained();
        } catch (...) {  // only wakes a timer; the health tick prunes anyway
        }
    }
    inst_.reset();
}

Registry::Registry(net::any_io_executor ex, upstream::Client& client, metrics::RouterMetrics& m,
                   const config::Config& cfg)
    : ex_(std::move(ex)),
      client_(client),
      metrics_(m),
      cfg_(cfg),
      policies_{make_policy(cfg.prefill_policy, cfg), make_policy(cfg.decode_policy, cfg)},
      health_timer_(ex_),
      tasks_(ex_) {
    update_counts(Role::Prefill);
    update_counts(Role::Decode);
}

Registry::~Registry() {
    stop();
}

InstancePtr Registry::insert(Role role, const config::InstanceAddress& a, InstanceKv kv) {
    auto inst = std::make_shared<Instance>();
    inst->role = role;
    inst->name = a.text();
    inst->public_name = cfg_.hide_instance_addresses
                            ? std::string(to_string(role)) + "-" +
                                  std::to_string(next_public_number_[index(role)]++)
                            : inst->name;
    inst->endpoint = upstream::Endpoint{a.host, a.port};
    inst->kv = std::move(kv);
    auto series = metrics_.instance(metrics_role(role), inst->public_name);
    inst->in_flight_gauge = &series.in_flight;
    inst->requests_counter = &series.requests;
    inst->up_gauge = &series.up;
    inst->up_gauge->Set(1);
    inst->next_probe = Clock::now() + cfg_.health_interval;
    instances_[index(role)].push_back(inst);
    update_counts(role);
    wake_health_loop();
    if (back_handler_) {
        back_handler_(*inst);
    }
    return inst;
}

void Registry::add_configured(Role role, const config::InstanceAddress& a, InstanceKv kv) {
    SharedLock lock;
    if (find(role, a.text())) {
        PDR_WARN(kLog,
                 "ignoring duplicate " + std::string(to_string(role)) + " instance " + a.text());
        return;
    }
    insert(role, a, std::move(kv));
}

InstancePtr Registry::find(Role role, std::string_view name) const {
    SharedLock lock;
    for (const auto& inst : instances_[index(role)]) {
        if (!inst->removed && inst->name == name) {
            return inst;
        }
    }
    return nullptr;
}

// Drops removed instances whose last request has finished, and hides their metric series
// unless a live instance of the same public name (re-added, addresses shown) shares them.
void Registry::prune(Role role) {
    auto& v = instances_[index(role)];
    std::vector<InstancePtr> gone;
    std::erase_if(v, [&](const InstancePtr& inst) {
        if (inst->removed && inst->in_flight == 0) {
            gone.push_back(inst);
            return true;
        }
        return false;
    });
    for (const auto& inst : gone) {
        const bool shared = std::any_of(v.begin(), v.end(), [&](const InstancePtr& other) {
            return other->public_name == inst->public_name;
        });
        if (!shared) {
            metrics_.remove_instance(metrics_role(role), inst->public_name);
        }
    }
}

void Registry::update_counts(Role role) {
    std::size_t up = 0, down = 0;
    for (const auto& inst : instances_[index(role)]) {
        if (inst->removed) {
            continue;
        }
        (inst->up ? up : down) += 1;
    }
    metrics_.set_instance_counts(metrics_role(role), up, down);
}

InstancePtr Registry::pick(Role role, const Instance* exclude, bool (*usable)(const Instance&),
                           const PickHint& hint) {
    SharedLock lock;
    prune(role);
    const auto& v = instances_[index(role)];
    std::vector<std::size_t>& candidates = candidates_;
    candidates.clear();
    for (std::size_t at = 0; at < v.size(); ++at) {
        const auto& inst = v[at];
        if (inst->up && !inst->removed && inst.get() != exclude &&
            !(inst->on_trial && inst->in_flight > 0) && (usable == nullptr || usable(*inst))) {
            candidates.push_back(at);
        }
    }
    if (candidates.empty()) {
        return nullptr;
    }
    Policy& policy = *policies_[index(role)];
    const std::size_t at = policy.choose(v, candidates, hint);
    metrics_.policy_pick(role, policy.kind());
    return v[at];
}

void Registry::set_policy(Role role, std::unique_ptr<Policy> policy) {
    SharedLock lock;
    policies_[index(role)] = std::move(policy);
}

void Registry::mark_down(Instance& inst, std::string_view reason) {
    inst.up = false;
    inst.on_trial = false;
    inst.down_reason = std::string(reason);
    inst.backoff = std::clamp<Duration>(cfg_.health_backoff_max, Duration{10}, Duration{1000});
    inst.next_probe = Clock::now() + inst.backoff;
    if (inst.up_gauge != nullptr) {
        inst.up_gauge->Set(0);
    }
    PDR_WARN(kLog, std::string(to_string(inst.role)) + " instance " + inst.name +
                       " is down: " + std::string(reason));
    update_counts(inst.role);
    wake_health_loop();
}

void Registry::report_failure(Instance& inst, std::string_view reason) {
    SharedLock lock;
    ++inst.failures;
    inst.last_error = std::string(reason);
    if (inst.up && !inst.removed) {
        mark_down(inst, trial_reason(inst, reason));
    }
}

void Registry::report_error(Instance& inst, std::string_view reason) {
    SharedLock lock;
    ++inst.failures;
    inst.last_error = std::string(reason);
    // On trial, the first error is enough: the instance had just failed.
    if ((++inst.consecutive_errors >= kErrorsToMarkDown || inst.on_trial) && inst.up &&
        !inst.removed) {
        mark_down(inst, trial_reason(inst, reason));
    }
}

std::string Registry::trial_reason(const Instance& inst, std::string_view reason) {
    return inst.on_trial
               ? "its trial request after a passed health check failed: " + std::string(reason)
               : std::string(reason);
}

void Registry::start_trial(Instance& inst) {
    inst.consecutive_errors = 0;
    inst.up = true;
    inst.on_trial = true;
    inst.next_probe = Clock::now() + cfg_.health_interval;
    if (inst.up_gauge != nullptr) {
        inst.up_gauge->Set(1);
    }
    PDR_INFO(kLog, std::string(to_string(inst.role)) + " instance " + inst.name +
                       " passed its health check: on trial, one request at a time until one "
                       "succeeds");
    update_counts(inst.role);
    if (back_handler_) {
        back_handler_(inst);
    }
}

void Registry::report_leg_failure(Instance& inst, upstream::Failure f, std::string_view reason) {
    SharedLock lock;
    // Only an instance that cannot be reached is down at once. A timeout on an answer is counted
    // like a 5xx: one overloaded moment must not take the only decode out of rotation.
    if (f == upstream::Failure::Connect || f == upstream::Failure::ConnectTimeout) {
        report_failure(inst, reason);
    } else {
        report_error(inst, reason);
    }
}

void Registry::report_success(Instance& inst) {
    SharedLock lock;
    inst.consecutive_errors = 0;
    if (inst.on_trial) {
        inst.on_trial = false;
        inst.backoff = Duration{0};
        PDR_INFO(kLog, std::string(to_string(inst.role)) + " instance " + inst.name +
                           " served its trial request: back in full rotation");
        return;
    }
    if (inst.up) {
        return;
    }
    inst.up = true;
    inst.backoff = Duration{0};
    inst.next_probe = Clock::now() + cfg_.health_interval;
    if (inst.up_gauge != nullptr) {
        inst.up_gauge->Set(1);
    }
    PDR_INFO(kLog, std::string(to_string(inst.role)) + " instance " + inst.name + " is up again");
    update_counts(inst.role);
}

std::size_t Registry::count(Role role, bool up_only) const {
    SharedLock lock;
    std::size_t n = 0;
    for (const auto& inst : instances_[index(role)]) {
        if (!inst->removed && (!up_only || inst->up)) {
            ++n;
        }
    }
    return n;
}

std::size_t Registry::count_usable(Role role, bool (*usable)(const Instance&)) const {
    SharedLock lock;
    std::size_t n = 0;
    for (const auto& inst : instances_[index(role)]) {
        if (!inst->removed && inst->up && usable(*inst)) {
            ++n;
        }
    }
    return n;
}

std::vector<InstancePtr> Registry::list(Role role) const {
    SharedLock lock;
    std::vector<InstancePtr> out;
    for (const auto& inst : instances_[index(role)]) {
        if (!inst->removed) {
            out.push_back(inst);
        }
    }
    return out;
}

nlohmann::json Registry::to_json() const {
    SharedLock lock;
    auto out = nlohmann::json::array();
    for (const auto& v : instances_) {
        for (const auto& inst : v) {
            if (inst->removed && inst->in_flight == 0) {
                continue;
            }
            out.push_back({{"role", to_string(inst->role)},
                           {"name", inst->name},
                           {"public_name", inst->public_name},
                           {"up", inst->up},
                           {"on_trial", inst->on_trial},
                           {"removed", inst->removed},
                           {"in_flight", inst->in_flight},
                           {"load", inst->load},
                           {"source", inst->source},
                           {"requests", inst->requests},
                           {"failures", inst->failures},
                           {"last_error", inst->last_error}});
            const InstanceKv& kv = inst->kv;
            if (!kv.lmcache.empty()) {
                out.back()["lmcache_init_ports"] = kv.lmcache.init_ports;
                out.back()["lmcache_alloc_ports"] = kv.lmcache.alloc_ports;
                out.back()["lmcache_receiver_host"] =
                    kv.lmcache.host.empty() ? inst->endpoint.host : kv.lmcache.host;
            }
            if (kv.kv_ready_expected != 0) {
                out.back()["kv_ready_expected"] = kv.kv_ready_expected;
            }
            if (!kv.push.empty()) {
                out.back()["engine_id"] = kv.push.engine_id;
                out.back()["kv_host"] =
                    kv.push.kv_host.empty() ? inst->endpoint.host : kv.push.kv_host;
                out.back()["side_channel_port"] = kv.push.side_channel_port;
                out.back()["tp_size"] = kv.push.tp_size;
                out.back()["pp_size"] = kv.push.pp_size;
            }
        }
    }
    return out;
}

}  // namespace pdr::instances
