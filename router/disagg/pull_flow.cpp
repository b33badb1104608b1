#include "router/disagg/pull_flow.hpp"

#include "net/common/log.hpp"
#include "router/disagg/decode_leg.hpp"

#include <algorithm>

namespace pdr::disagg {

namespace {

using instances::Role;
using metrics::Leg;

enum class PrefillEnd { Handle, Recompute, Answered };

std::string status_reason(unsigned status, std::string_view body) {
    constexpr std::size_t kMaxBody = 200;
    std::string s = "answered HTTP " + std::to_string(status);
    if (!body.empty()) {
        s.append(": ").append(body.substr(0, kMaxBody));
    }
    return s;
}

// Runs the prefill leg (with retries on another P). On Handle, `handle` and `prefill` are set.
// Otherwise the client has been answered (or is gone), or the caller must recompute on D.
awaitable<PrefillEnd> run_prefill_leg(FlowDeps& deps, FlowRequest& req, std::string body,
                                      KvHandle& handle, instances::InstancePtr& prefill) {
    const upstream::Timeouts timeouts{deps.cfg.connect_timeout, deps.cfg.prefill_timeout,
                                      deps.cfg.prefill_timeout};
    const int attempts = 1 + std::max(0, deps.cfg.prefill_retries);
    const instances::Instance* exclude = nullptr;
    Errc last_errc = Errc::UpstreamConnect;
    std::string last_error;
    for (int attempt = 0;; ++attempt) {
        instances::InstancePtr p = deps.registry.pick(Role::Prefill, exclude);
        if (!p) {
            if (attempt == 0) {
                co_await respond_no_instance(deps, req, Leg::Prefill);
            } else {
                log_failure(
                    req.request_id, "prefill", {},
                    "no other healthy prefill instance to retry on (last try: " + last_error + ")");
                co_await respond_error(req.exchange, last_errc, "prefill instance " + last_error);
            }
            co_return PrefillEnd::Answered;
        }
        if (attempt > 0) {
            deps.metrics.retry(Leg::Prefill);
        }
        instances::InFlight in_flight = deps.registry.acquire(p);
        const bool last = attempt + 1 >= attempts;
        // Built per attempt: a retry is rare, so only the body is kept for it (not a whole copy).
        upstream::Request attempt_req =
            make_leg_request(http::verb::post, req.target, req.request_id, req.headers,
                             last ? std::move(body) : body);
        const Clock::time_point leg_start = Clock::now();
        upstream::Result result =
            co_await deps.client.request(p->endpoint, std::move(attempt_req), timeouts);
        if (result.failure == upstream::Failure::Canceled || req.exchange.client_gone()) {
            deps.metrics.client_disconnect(metrics::DisconnectPhase::Prefill);
            co_return PrefillEnd::Answered;
        }
        deps.metrics.leg_done(Leg::Prefill, seconds_since(leg_start));
        const unsigned status = result.ok() ? result.response.result_int() : 0;
        if (!result.ok() || status >= 500) {
            // Connect failure, timeout, broken answer or 5xx: this P is unhealthy; try another.
            std::string reason;
            if (!result.ok()) {
                deps.metrics.upstream_error(Leg::Prefill, error_kind_for(result.failure));
                reason = upstream::describe(result.failure, result.ec);
                last_errc = errc_for(result.failure);
            } else {
                deps.metrics.upstream_error(Leg::Prefill, metrics::UpstreamErrorKind::Status5xx);
                reason = status_reason(status, result.response.body());
                last_errc = Errc::UpstreamProtocol;
            }
            last_error = p->name + " " + reason;
            if (result.ok()) {
                deps.registry.report_error(*p, reason);
            } else {
                deps.registry.report_leg_failure(*p, result.failure, reason);
            }
            if (!last) {
                log_retry(req.request_id, "prefill", p->name, reason);
                exclude = p.get();
                continue;
            }
            log_failure(req.request_id, "prefill", p->name, reason);
            co_await respond_error(req.exchange, last_errc, "prefill instance " + last_error);
            co_return PrefillEnd::Answered;
        }
        if (status >= 400) {
            // The request itself is bad: P's answer goes to the client as it is. P answered, so
            // it is working (as for a decode 4xx): its error count starts again.
            deps.registry.report_success(*p);
            deps.metrics.upstream_error(Leg::Prefill, metrics::UpstreamErrorKind::Status4xx);
            log_failure(req.request_id, "prefill", p->name, status_reason(status, {}));
            auto ct = result.response[http::field::content_type];
            auto retry_after = result.response[http::field::retry_after];
            co_await respond_relayed(req.exchange, status, ct, std::move(result.response.body()),
                                     retry_after);
            co_return PrefillEnd::Answered;
        }
        HandleStatus hs =
            status < 300 ? parse_kv_handle(result.response.body(), handle) : HandleStatus::NotJson;
        if (hs == HandleStatus::NotJson) {
            // An unparsable answer: P is broken (as for a 5xx), so another P is tried and three
            // in a row mark this one down.
            deps.metrics.upstream_error(Leg::Prefill, metrics::UpstreamErrorKind::Protocol);
            const std::string reason = "sent an answer (HTTP " + std::to_string(status) +
                                       ") that is not a JSON object within the JSON limits";
            deps.registry.report_error(*p, reason);
            last_errc = Errc::UpstreamProtocol;
            last_error = p->name + " " + reason;
            if (!last) {
                log_retry(req.request_id, "prefill", p->name, reason);
                exclude = p.get();
                continue;
            }
            log_failure(req.request_id, "prefill", p->name, reason);
            co_await respond_error(req.exchange, Errc::UpstreamProtocol,
                                   "prefill instance " + last_error);
            co_return PrefillEnd::Answered;
        }
        deps.registry.report_success(*p);
        if (hs == HandleStatus::Ok) {
            prefill = std::move(p);
            co_return PrefillEnd::Handle;
        }
        deps.metrics.upstream_error(Leg::Prefill, metrics::UpstreamErrorKind::MissingKvParams);
        if (deps.cfg.on_missing_kv_params == config::OnMissingKvParams::Recompute) {
            // the request goes on: not a failure, but worth a line (decode redoes the prefill)
            log::write(log::Level::Warn, kLogComponent,
                       "prefill instance " + p->name +
                           " answered without kv_transfer_params; decode recomputes the prompt",
                       req.request_id);
            co_return PrefillEnd::Recompute;
        }
        log_failure(req.request_id, "prefill", p->name, "answer has no kv_transfer_params");
        co_await respond_error(req.exchange, Errc::MissingKvParams,
                               "prefill instance " + p->name +
                                   " answered without kv_transfer_params (no KV handle to "
                                   "hand over to decode)");
        co_return PrefillEnd::Answered;
    }
}

// Runs when D's first body byte arrives: stop refreshing P's lease, record the handover gap.
struct HandoverState {
    kv::LeaseKeeper::Hold hold;
    metrics::RouterMetrics* metrics = nullptr;
    Clock::time_point prefill_answered;
    Duration lease{0};
    bool seen = false;

    // With refreshes off (inactive hold) only P's first lease counts.
    static Clock::time_point kv_valid_until(void* ctx) {
        auto* self = static_cast<HandoverState*>(ctx);
        return self->hold.active() ? self->hold.lease_until()
                                   : self->prefill_answered + self->lease;
    }

    static void on_first_byte(void* ctx) {
        auto* self = static_cast<HandoverState*>(ctx);
        if (self->seen) {
            return;
        }
        self->seen = true;
        self->hold.first_byte();
        self->metrics->kv_handover_gap.Observe(seconds_since(self->prefill_answered));
    }
};

bool check_capacity(FlowDeps& deps, Role role) {
    return deps.registry.count(role, true) > 0;
}

}  // namespace

awaitable<void> run_pull_flow(FlowDeps& deps, FlowRequest& req) {
    deps.metrics.flow_started(metrics::FlowMode::Pull);
    if (!check_capacity(deps, Role::Prefill)) {
        co_await respond_no_instance(deps, req, Leg::Prefill);
        co_return;
    }
    if (!check_capacity(deps, Role::Decode)) {
        co_await respond_no_instance(deps, req, Leg::Decode);
        co_return;
    }
    UpstreamCanceler canceler(req.exchange);
    KvHandle handle;
    instances::InstancePtr prefill;
    PrefillEnd end =
        co_await run_prefill_leg(deps, req, make_prefill_body(req.body), handle, prefill);
    if (end == PrefillEnd::Answered) {
        co_return;
    }
    if (end == PrefillEnd::Recompute) {
        deps.metrics.recomputes.Increment();
        co_await run_decode_leg(deps, req, canceler, make_plain_decode_body(req.raw_body), {});
        co_return;
    }

    // Handover: keep P's blocks alive until D's first byte; release when the decode leg ends.
    HandoverState state;
    state.metrics = &deps.metrics;
    state.prefill_answered = Clock::now();
    state.lease = deps.cfg.kv_lease_timeout;
    std::string p_request_id =
        handle.remote_request_id.empty() ? req.request_id : handle.remote_request_id;
    state.hold = deps.lease_keeper.hold(std::move(p_request_id), prefill->endpoint);
    std::string decode_body = make_decode_body(req.raw_body, handle.params);
    handle.params = std::string();
    FirstByteHook hook{&HandoverState::on_first_byte, &state};
    HandleValidity validity{&HandoverState::kv_valid_until, &state};
    co_await run_decode_leg(deps, req, canceler, std::move(decode_body), hook, validity);
}

awaitable<void> run_direct_flow(FlowDeps& deps, FlowRequest& req) {
    deps.metrics.flow_started(metrics::FlowMode::Direct);
    UpstreamCanceler canceler(req.exchange);
    co_await run_decode_leg(deps, req, canceler, make_plain_decode_body(req.raw_body), {});
}

}  // namespace pdr::disagg
