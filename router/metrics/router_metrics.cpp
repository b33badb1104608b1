#include "router/metrics/router_metrics.hpp"

#ifndef PDR_VERSION
#define PDR_VERSION "0.0.0"
#endif

namespace pdr::metrics {

std::string_view to_string(Route r) noexcept {
    switch (r) {
        case Route::Completions:
            return "completions";
        case Route::ChatCompletions:
            return "chat_completions";
        case Route::Models:
            return "models";
        case Route::Health:
            return "health";
        case Route::Status:
            return "status";
        case Route::Metrics:
            return "metrics";
        case Route::Instances:
            return "instances";
        case Route::LeaseRefresh:
            return "lease_refresh";
        case Route::Other:
            return "other";
    }
    return "other";
}

std::string_view to_string(Leg l) noexcept {
    return l == Leg::Prefill ? "prefill" : "decode";
}

std::string_view to_string(UpstreamErrorKind k) noexcept {
    switch (k) {
        case UpstreamErrorKind::Connect:
            return "connect";
        case UpstreamErrorKind::ConnectTimeout:
            return "connect_timeout";
        case UpstreamErrorKind::Timeout:
            return "timeout";
        case UpstreamErrorKind::IdleTimeout:
            return "idle_timeout";
        case UpstreamErrorKind::Read:
            return "read";
        case UpstreamErrorKind::Write:
            return "write";
        case UpstreamErrorKind::Protocol:
            return "protocol";
        case UpstreamErrorKind::Status4xx:
            return "status_4xx";
        case UpstreamErrorKind::Status5xx:
            return "status_5xx";
        case UpstreamErrorKind::MissingKvParams:
            return "missing_kv_params";
        case UpstreamErrorKind::KvLeaseExpiring:
            return "kv_lease_expiring";
        case UpstreamErrorKind::NoInstance:
            return "no_instance";
    }
    return "protocol";
}

std::string_view to_string(DisconnectPhase p) noexcept {
    switch (p) {
        case DisconnectPhase::Prefill:
            return "prefill";
        case DisconnectPhase::Handover:
            return "handover";
        case DisconnectPhase::Decode:
            return "decode";
    }
    return "decode";
}

std::string_view to_string(Role r) noexcept {
    return r == Role::Prefill ? "prefill" : "decode";
}

std::string_view to_string(FlowMode m) noexcept {
    switch (m) {
        case FlowMode::Pull:
            return "pull";
        case FlowMode::Push:
            return "push";
        case FlowMode::Lmcache:
            return "lmcache";
        case FlowMode::Direct:
            return "direct";
    }
    return "direct";
}

namespace {

constexpr std::string_view kStatusClasses[4] = {"2xx", "3xx", "4xx", "5xx"};

std::size_t status_index(int status) noexcept {
    if (status < 300) {
        return 0;
    }
    if (status >= 500) {
        return 3;
    }
    return static_cast<std::size_t>(status / 100 - 2);
}

std::string s(std::string_view v) {
    return std::string(v);
}

template <class E>
std::size_t idx(E e) noexcept {
    return static_cast<std::size_t>(e);
}

// Label-less series, created in the constructor's initializer list.
Counter& plain_counter(Registry& r, std::string_view name, std::string_view help) {
    return r.counter(name, help);
}

}  // namespace

std::string_view status_class(int status) noexcept {
    return kStatusClasses[status_index(status)];
}

RouterMetrics::RouterMetrics(Registry& registry)
    : requests_in_flight(
          registry.gauge("pdrouter_requests_in_flight", "Client requests being handled now.")),
      lease_refresh_sent(plain_counter(registry, "pdrouter_lease_refresh_sent_total",
                                       "KV lease ids the router refreshed toward prefill "
                                       "instances.")),
      lease_refresh_forwarded(plain_counter(
          registry, "pdrouter_lease_refresh_forwarded_total",
          "Lease ids from inbound lease_refresh requests forwarded to their prefill instance.")),
      lease_refresh_unknown(plain_counter(
          registry, "pdrouter_lease_refresh_unknown_total",
          "Lease ids from inbound lease_refresh requests that the router did not know.")),
      kv_handles_held(registry.gauge("pdrouter_kv_handles_held",
                                     "KV handles the router is keeping alive on prefill "
                                     "instances.")),
      kv_handover_gap(
          registry.histogram("pdrouter_kv_handover_gap_seconds",
                             "Time from the prefill answer to the decode leg's first byte.")),
      recomputes(plain_counter(registry, "pdrouter_recomputes_total",
                               "Requests whose KV was recomputed (re-prefilled or decoded "
                               "without remote KV).")),
      registry_(registry) {
    for (std::size_t r = 0; r < kRouteCount; ++r) {
        std::string route = s(to_string(static_cast<Route>(r)));
        for (std::size_t c = 0; c < 4; ++c) {
            requests_[r][c] = &registry.counter(
                "pdrouter_requests_total", "Client requests answered, by route and status class.",
                {{"route", route}, {"status_class", s(kStatusClasses[c])}});
        }
        request_duration_[r] = &registry.histogram(
            "pdrouter_request_duration_seconds",
            "Client request duration, from the request head to the last byte sent.",
            {{"route", route}});
    }
    ttfb_[0] = &registry.histogram(
        "pdrouter_time_to_first_byte_seconds",
        "Client-visible time to first byte of the response body (TTFT for streams).",
        {{"route", "completions"}});
    ttfb_[1] = &registry.histogram("pdrouter_time_to_first_byte_seconds", "",
                                   {{"route", "chat_completions"}});
    for (std::size_t l = 0; l < kLegCount; ++l) {
        std::string leg = s(to_string(static_cast<Leg>(l)));
        leg_duration_[l] = &registry.histogram(
            "pdrouter_leg_duration_seconds",
            "Duration of one upstream leg (prefill: whole leg; decode: until the last byte).",
            {{"leg", leg}});
        for (std::size_t k = 0; k < kUpstreamErrorKindCount; ++k) {
            upstream_errors_[l][k] = &registry.counter(
                "pdrouter_upstream_errors_total", "Upstream failures, by leg and kind.",
                {{"leg", leg}, {"kind", s(to_string(static_cast<UpstreamErrorKind>(k)))}});
        }
        retries_[l] =
            &registry.counter("pdrouter_retries_total",
                              "Upstream attempts retried on another instance.", {{"leg", leg}});
        mid_stream_errors_[l] = &registry.counter(
            "pdrouter_mid_stream_errors_total",
            "Upstream failures after the response head was sent to the client.", {{"leg", leg}});
    }
    for (std::size_t p = 0; p < kDisconnectPhaseCount; ++p) {
        disconnects_[p] = &registry.counter(
            "pdrouter_client_disconnects_total",
            "Clients that went away before the response ended, by the phase they left in.",
            {{"phase", s(to_string(static_cast<DisconnectPhase>(p)))}});
    }
    for (std::size_t m = 0; m < kFlowModeCount; ++m) {
        flows_[m] = &registry.counter("pdrouter_flow_requests_total",
                                      "Generation requests started, by KV handover mode.",
                                      {{"mode", s(to_string(static_cast<FlowMode>(m)))}});
    }
    const char* results[2] = {"ok", "error"};
    for (std::size_t i = 0; i < 2; ++i) {
        lease_refresh_requests_[i] =
            &registry.counter("pdrouter_lease_refresh_requests_total",
                              "Lease refresh requests sent to prefill instances, by result.",
                              {{"result", results[i]}});
    }
    const char* health[2] = {"up", "down"};
    for (std::size_t r = 0; r < kRoleCount; ++r) {
        for (std::size_t h = 0; h < 2; ++h) {
            instances_[r][h] = &registry.gauge(
                "pdrouter_instances", "Configured instances, by role and health.",
                {{"role", s(to_string(static_cast<Role>(r)))}, {"health", health[h]}});
        }
    }
    registry
        .gauge("pdrouter_build_info", "Build information; the value is always 1.",
               {{"version", PDR_VERSION}})
        .set(1);
    // Families whose series appear on first use: register HELP text now.
    registry.counter("pdrouter_bad_requests_total", "Client requests rejected, by error code.",
                     {{"code", "invalid_request_error"}});
    registry.remove("pdrouter_bad_requests_total", {{"code", "invalid_request_error"}});
    Labels admin{{"action", "add"}, {"result", "ok"}};
    registry.counter("pdrouter_admin_requests_total", "Admin API requests, by action and result.",
                     admin);
    registry.remove("pdrouter_admin_requests_total", admin);
}

void RouterMetrics::request_done(Route route, int status) noexcept {
    requests_[idx(route)][status_index(status)]->inc();
}

void RouterMetrics::request_done(Route route, int status, double seconds) noexcept {
    request_done(route, status);
    request_duration_[idx(route)]->observe(seconds);
}

void RouterMetrics::first_byte(Route route, double seconds) noexcept {
    if (route == Route::Completions) {
        ttfb_[0]->observe(seconds);
    }
    if (route == Route::ChatCompletions) {
        ttfb_[1]->observe(seconds);
    }
}

void RouterMetrics::leg_done(Leg leg, double seconds) noexcept {
    leg_duration_[idx(leg)]->observe(seconds);
}

void RouterMetrics::upstream_error(Leg leg, UpstreamErrorKind kind) noexcept {
    upstream_errors_[idx(leg)][idx(kind)]->inc();
}

void RouterMetrics::retry(Leg leg) noexcept {
    retries_[idx(leg)]->inc();
}

void RouterMetrics::client_disconnect(DisconnectPhase phase) noexcept {
    disconnects_[idx(phase)]->inc();
}

void RouterMetrics::mid_stream_error(Leg leg) noexcept {
    mid_stream_errors_[idx(leg)]->inc();
}

void RouterMetrics::flow_started(FlowMode mode) noexcept {
    flows_[idx(mode)]->inc();
}

void RouterMetrics::lease_refresh_request(bool ok) noexcept {
    lease_refresh_requests_[ok ? 0 : 1]->inc();
}

void RouterMetrics::bad_request(std::string_view code) {
    registry_.counter("pdrouter_bad_requests_total", "", {{"code", s(code)}}).inc();
}

void RouterMetrics::admin_request(std::string_view action, std::string_view result) {
    registry_
        .counter("pdrouter_admin_requests_total", "Admin API requests, by action and result.",
                 {{"action", s(action)}, {"result", s(result)}})
        .inc();
}

InstanceMetrics RouterMetrics::instance(Role role, std::string_view instance) {
    Labels labels{{"role", s(to_string(role))}, {"instance", s(instance)}};
    return InstanceMetrics{
        registry_.gauge("pdrouter_instance_in_flight",
                        "Requests in flight on one instance (prefill or decode leg).", labels),
        registry_.counter("pdrouter_instance_requests_total",
                          "Upstream requests sent to one instance.", labels),
        registry_.gauge("pdrouter_instance_up",
                        "1 if the instance passed its last health probe, else 0.", labels),
    };
}

void RouterMetrics::remove_instance(Role role, std::string_view instance) {
    Labels labels{{"role", s(to_string(role))}, {"instance", s(instance)}};
    registry_.remove("pdrouter_instance_in_flight", labels);
    registry_.remove("pdrouter_instance_requests_total", labels);
    registry_.remove("pdrouter_instance_up", labels);
}

void RouterMetrics::set_instance_counts(Role role, std::size_t up, std::size_t down) noexcept {
    instances_[idx(role)][0]->set(static_cast<double>(up));
    instances_[idx(role)][1]->set(static_cast<double>(down));
}

}  // namespace pdr::metrics
