// Health loop and probes: GET /health (or /v1/models) on a schedule per instance.
#include <algorithm>
#include <variant>

#include <boost/asio/experimental/awaitable_operators.hpp>

#include "net/common/log.hpp"
#include "router/instances/registry.hpp"

namespace pdr::instances {

namespace {
constexpr std::string_view kLog = "instances";

std::string_view last_component(std::string_view s) noexcept {
    const auto slash = s.find_last_of('/');
    return slash == std::string_view::npos ? s : s.substr(slash + 1);
}

std::string describe(const upstream::Result& r) {
    std::string out(upstream::to_string(r.failure));
    if (r.ec) {
        out += " (" + r.ec.message() + ")";
    }
    return out;
}
}  // namespace

void fail_stalled_legs(upstream::Client& client, metrics::RouterMetrics& metrics, Role role,
                       const std::string& name, const upstream::Endpoint& ep, Duration quiet) {
    const std::size_t n = client.fail_stalled(ep, quiet);
    if (n == 0) {
        return;
    }
    metrics.legs_failed_on_down(role, n);
    PDR_WARN(kLog, std::string(to_string(role)) + " instance " + name + " is down: failing " +
                       std::to_string(n) + " stalled legs (nothing received for " +
                       std::to_string(quiet.count()) + " ms or more)");
}

void Registry::fail_stalled(const Instance& inst, Duration quiet) {
    if (stalled_handler_) {
        stalled_handler_(inst, quiet);
    } else {
        fail_stalled_legs(client_, metrics_, inst.role, inst.name, inst.endpoint, quiet);
    }
}

bool model_matches(std::string_view served, std::string_view wanted) noexcept {
    if (served == wanted) {
        return true;
    }
    const auto a = last_component(served);
    const auto b = last_component(wanted);
    return !a.empty() && a == b;
}

upstream::Request Registry::make_get(std::string_view target, bool with_key) const {
    upstream::Request req{http::verb::get, target, 11};
    req.set(http::field::accept, "application/json");
    req.set(http::field::user_agent, "pdrouter");
    if (!router_id_.empty()) {
        req.set(kHopHeader, router_id_);
    }
    if (with_key && !cfg_.upstream_api_key.empty()) {
        req.set(http::field::authorization, "Bearer " + cfg_.upstream_api_key);
    }
    return req;
}

upstream::Timeouts Registry::probe_timeouts() const {
    const Duration total = cfg_.connect_timeout + Duration{2000};
    return upstream::Timeouts{cfg_.connect_timeout, total, total};
}

awaitable<ModelProbe> Registry::probe_models(upstream::Endpoint ep, bool with_key) {
    ModelProbe out;
    auto req = make_get("/v1/models", with_key);
    const auto timeouts = probe_timeouts();
    auto res = co_await client_.request(ep, std::move(req), timeouts);
    if (!res.ok()) {
        out.error = "GET /v1/models failed: " + describe(res);
        out.errc = upstream::errc_for(res.failure);
        co_return out;
    }
    const unsigned status = res.response.result_int();
    if (status == 508) {
        out.error =
            "GET /v1/models answered HTTP 508 loop detected: routers on the way route to "
            "each other";
        co_return out;
    }
    if (status < 200 || status >= 300) {
        out.error = "GET /v1/models answered HTTP " + std::to_string(status);
        co_return out;
    }
    auto body = nlohmann::json::parse(res.response.body(), nullptr, false);
    if (!body.is_object() || !body.contains("data") || !body["data"].is_array()) {
        out.error = "GET /v1/models did not return a model list";
        co_return out;
    }
    for (const auto& m : body["data"]) {
        if (m.is_object() && m.contains("id") && m["id"].is_string()) {
            out.models.push_back(m["id"].get<std::string>());
        }
    }
    out.ok = true;
    co_return out;
}

awaitable<Registry::ProbeOutcome> Registry::probe_health(upstream::Endpoint ep, bool with_key) {
    auto req = make_get("/health", with_key);
    const auto timeouts = probe_timeouts();
    auto res = co_await client_.request(ep, std::move(req), timeouts);
    if (!res.ok()) {
        co_return ProbeOutcome{false, "GET /health failed: " + describe(res)};
    }
    const unsigned status = res.response.result_int();
    if (status >= 200 && status < 300) {
        co_return ProbeOutcome{true, {}};
    }
    if (status == 404 || status == 405) {
        auto models = co_await probe_models(ep, with_key);
        co_return ProbeOutcome{models.ok, models.error};
    }
    co_return ProbeOutcome{false, "GET /health answered HTTP " + std::to_string(status)};
}

void Registry::start() {
    if (started_ || stopped_) {
        return;
    }
    started_ = true;
    tasks_.spawn(health_loop());
}

void Registry::stop() {
    if (stopped_) {
        return;
    }
    stopped_ = true;
    health_timer_.cancel();
    tasks_.stop();
}

void Registry::wake_health_loop() {
    if (started_ && !stopped_) {
        health_timer_.cancel();
    }
}

awaitable<void> Registry::health_loop() {
    const TaskGroup::Alive alive = tasks_.alive();
    while (!stopped_) {
        const auto now = Clock::now();
        auto next = now + cfg_.health_interval;
        for (auto role : {Role::Prefill, Role::Decode}) {
            prune(role);
            for (const auto& inst : instances_[role == Role::Prefill ? 0 : 1]) {
                if (inst->removed || inst->probing) {
                    continue;
                }
                if (inst->next_probe <= now) {
                    inst->probing = true;
                    tasks_.spawn(run_probe(inst));
                } else {
                    next = std::min(next, inst->next_probe);
                }
            }
        }
        // The same tick closes pooled connections the instances closed or that idled too long,
        // so they do not linger (CLOSE_WAIT) while no request uses their endpoint.
        client_.sweep_idle();
        if (sweep_handler_) {
            sweep_handler_();
        }
        health_timer_.expires_at(next);
        co_await health_timer_.async_wait();
        if (!alive) {
            co_return;
        }
    }
}

awaitable<void> Registry::run_probe(InstancePtr inst) {
    const TaskGroup::Alive alive = tasks_.alive();
    const ProbeOutcome outcome = co_await probe_health(inst->endpoint, inst->upstream_key);
    if (!alive) {
        co_return;
    }
    inst->probing = false;
    if (stopped_ || inst->removed) {
        co_return;  // a stop cancelled the probe: its outcome says nothing of the instance
    }
    const auto now = Clock::now();
    if (outcome.ok) {
        // A down instance comes back on trial (half-open): one request at a time until one
        // succeeds; one failure takes it down again. An up one keeps its error count: an engine
        // that answers GET /health but fails every request must still reach 3 errors in a row.
        if (!inst->up) {
            start_trial(*inst);
        }
        inst->next_probe = now + cfg_.health_interval;
    } else if (inst->up) {
        inst->last_error = outcome.error;
        mark_down(*inst, "health check: " + outcome.error);
        fail_stalled(*inst, probe_timeouts().response);
    } else {
        inst->last_error = outcome.error;
        inst->backoff = std::max<Duration>(
            Duration{10}, std::min<Duration>(inst->backoff * 2, cfg_.health_backoff_max));
        inst->next_probe = now + inst->backoff;
        PDR_DEBUG(kLog, std::string(to_string(inst->role)) + " instance " + inst->name +
                            " still down: " + outcome.error);
        // Legs that began to wait just before it stopped are caught by a later probe.
        fail_stalled(*inst, probe_timeouts().response);
    }
    wake_health_loop();
}

}  // namespace pdr::instances
