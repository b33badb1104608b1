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
        case Route::PassThrough:
            return "pass_through";
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

// Label values of the KV-ready families, in the order of their enums.
constexpr std::string_view kKvReadyOutcomes[] = {"matched", "early", "duplicate", "unknown",
                                                 "malformed"};
constexpr std::string_view kKvReadyMalformedReasons[] = {"not_msgpack", "not_map",   "no_req_id",
                                                         "id_too_long", "multipart", "too_large"};
constexpr std::string_view kKvReadyEvictions[] = {"ttl", "capacity"};
constexpr std::string_view kKvReadyTimeoutPolicies[] = {"error", "proceed"};
static_assert(std::size(kKvReadyOutcomes) == kKvReadyOutcomeCount);
static_assert(std::size(kKvReadyMalformedReasons) == kKvReadyMalformedCount);
static_assert(std::size(kKvReadyEvictions) == kKvReadyEvictionCount);
static_assert(std::size(kKvReadyTimeoutPolicies) == kKvReadyTimeoutPolicyCount);
constexpr std::string_view kKvReadyForwards[] = {"sent", "received", "queue_full", "unknown_owner",
                                                 "not_owner"};
static_assert(std::size(kKvReadyForwards) == kKvReadyForwardCount);
constexpr std::string_view kKvReadyRefusedReasons[] = {"address", "key"};
static_assert(std::size(kKvReadyRefusedReasons) == kKvReadyRefusedCount);
constexpr std::string_view kDiscoveryRoles[] = {"prefill", "decode", "router"};
static_assert(std::size(kDiscoveryRoles) == kDiscoveryRoleCount);
constexpr std::string_view kDiscoveryResults[] = {"ok", "empty", "failed"};
static_assert(std::size(kDiscoveryResults) == kDiscoveryResultCount);

std::string_view to_string(KvReadyOutcome o) noexcept {
    return kKvReadyOutcomes[static_cast<std::size_t>(o)];
}

std::string_view to_string(KvReadyMalformed r) noexcept {
    return kKvReadyMalformedReasons[static_cast<std::size_t>(r)];
}

std::string_view to_string(KvReadyEviction r) noexcept {
    return kKvReadyEvictions[static_cast<std::size_t>(r)];
}

std::string_view to_string(KvReadyTimeoutPolicy p) noexcept {
    return kKvReadyTimeoutPolicies[static_cast<std::size_t>(p)];
}

std::string_view to_string(KvReadyForward f) noexcept {
    return kKvReadyForwards[static_cast<std::size_t>(f)];
}

std::string_view to_string(KvReadyRefused r) noexcept {
    return kKvReadyRefusedReasons[static_cast<std::size_t>(r)];
}

std::string_view to_string(DiscoveryRole r) noexcept {
    return kDiscoveryRoles[static_cast<std::size_t>(r)];
}

std::string_view to_string(DiscoveryResult r) noexcept {
    return kDiscoveryResults[static_cast<std::size_t>(r)];
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

// Help texts are written as they are (prometheus-cpp does not escape HELP): no backslash, no
// newline.
prometheus::Family<Counter>& counters(Registry& r, const std::string& name,
                                      const std::string& help) {
    return prometheus::BuildCounter().Name(name).Help(help).Register(r.families());
}

prometheus::Family<Gauge>& gauges(Registry& r, const std::string& name, const std::string& help) {
    return prometheus::BuildGauge().Name(name).Help(help).Register(r.families());
}

prometheus::Family<Histogram>& histograms(Registry& r, const std::string& name,
                                          const std::string& help) {
    return prometheus::BuildHistogram().Name(name).Help(help).Register(r.families());
}

// One series per label value, in the values' order.
template <std::size_t N>
void add_each(std::array<Counter*, N>& out, prometheus::Family<Counter>& family,
              const std::string& label, const std::string_view (&values)[N]) {
    for (std::size_t i = 0; i < N; ++i) {
        out[i] = &family.Add({{label, s(values[i])}});
    }
}

Histogram& latency_histogram(prometheus::Family<Histogram>& family, const Labels& labels) {
    return family.Add(labels, latency_buckets());
}

}  // namespace

std::string_view status_class(int status) noexcept {
    return kStatusClasses[status_index(status)];
}

RouterMetrics::RouterMetrics(Registry& registry)
    : requests_in_flight(
          gauges(registry, "pdrouter_requests_in_flight", "Client requests being handled now.")
              .Add({})),
      lease_refresh_sent(counters(registry, "pdrouter_lease_refresh_sent_total",
                                  "KV lease ids the router refreshed toward prefill instances.")
                             .Add({})),
      lease_refresh_forwarded(
          counters(registry, "pdrouter_lease_refresh_forwarded_total",
                   "Lease ids from inbound lease_refresh requests forwarded to their prefill "
                   "instance.")
              .Add({})),
      lease_refresh_unknown(counters(registry, "pdrouter_lease_refresh_unknown_total",
                                     "Lease ids from inbound lease_refresh requests that the "
                                     "router did not know.")
                                .Add({})),
      kv_handles_held(gauges(registry, "pdrouter_kv_handles_held",
                             "KV handles the router is keeping alive on prefill instances.")
                          .Add({})),
      lease_route_absent(gauges(registry, "pdrouter_lease_refresh_route_absent",
                                "Prefill instances that answered 404/405 on the lease-refresh "
                                "route: not refreshed until asked again.")
                             .Add({})),
      kv_handover_gap(latency_histogram(
          histograms(registry, "pdrouter_kv_handover_gap_seconds",
                     "Time from the prefill answer to the decode leg's first byte."),
          {})),
      recomputes(counters(registry, "pdrouter_recomputes_total",
                          "Requests whose KV was recomputed (re-prefilled or decoded without "
                          "remote KV).")
                     .Add({})),
      decode_kv_params_removed(
          counters(registry, "pdrouter_decode_kv_params_removed_total",
                   "Decode answers (whole bodies or stream events) whose kv_transfer_params the "
                   "router took out before the client (--expose-decode-kv-params passes them).")
              .Add({})),
      kv_host_rewrites(counters(registry, "pdrouter_kv_host_rewrites_total",
                                "Pull-mode KV handles whose remote_host the router replaced by "
                                "the prefill's address (--rewrite-kv-host).")
                           .Add({})),
      kv_mode_mismatches(counters(registry, "pdrouter_kv_mode_mismatch_total",
                                  "Prefill answers whose transfer_mode was not the router's "
                                  "KV mode (a prefill configured for another KV mode).")
                             .Add({})),
      transfer_seconds(latency_histogram(
          histograms(registry, "pdrouter_transfer_seconds",
                     "Push mode with the transfer agent: time from dispatching a request's legs "
                     "to the prefill's copy of the KV write's Done note."),
          {})),
      transfer_bytes(counters(registry, "pdrouter_transfer_bytes_total",
                              "Push mode with the transfer agent: KV bytes the prefills reported "
                              "written (their Done notes).")
                         .Add({})),
      kv_ready_pending(gauges(registry, "pdrouter_kv_ready_pending",
                              "Entries in the LMCache kv-ready table (waiting requests, "
                              "unclaimed and finished ids kept until their TTL).")
                           .Add({})),
      kv_ready_wait(latency_histogram(
          histograms(registry, "pdrouter_kv_ready_wait_seconds",
                     "Time the LMCache flow waited for KV-ready notifications after the "
                     "prefill answer."),
          {})),
      kv_ready_peers(gauges(registry, "pdrouter_kv_ready_peers",
                            "Other router replicas whose PULL socket KV-ready notifications "
                            "for their requests are forwarded to.")
                         .Add({})),
      kv_ready_disconnects(
          counters(registry, "pdrouter_kv_ready_disconnects_total",
                   "Sender connections to the LMCache kv-ready socket that ended: the sender "
                   "closed it, the guard refused it, or libzmq dropped it for a message over "
                   "ZMQ_MAXMSGSIZE or a protocol error (notifications in flight on it are lost).")
              .Add({})),
      request_body_buffered(
          gauges(registry, "pdrouter_request_body_buffered_bytes",
                 "Request-body bytes held against --max-buffered-body-bytes (bodies still "
                 "arriving count with their whole Content-Length).")
              .Add({})),
      request_body_waiting(gauges(registry, "pdrouter_request_body_budget_waiting",
                                  "Requests waiting for --max-buffered-body-bytes to read their "
                                  "body.")
                               .Add({})),
      registry_(registry),
      bad_requests_(counters(registry, "pdrouter_bad_requests_total",
                             "Client requests rejected, by error code.")),
      admin_requests_(counters(registry, "pdrouter_admin_requests_total",
                               "Admin API requests, by action and result.")),
      transfer_notes_sent_(counters(registry, "pdrouter_transfer_notes_sent_total",
                                    "Notes the router's transfer agent sent to engines, by kind "
                                    "(abort, heartbeat) and result (ok, failed, no_pdx).")),
      transfer_notes_received_(
          counters(registry, "pdrouter_transfer_notes_received_total",
                   "Notes the router's transfer agent received, by kind (done, failed, other) "
                   "and outcome (matched, unknown, malformed).")),
      instance_in_flight_(gauges(registry, "pdrouter_instance_in_flight",
                                 "Requests in flight on one instance (prefill or decode leg).")),
      instance_requests_(counters(registry, "pdrouter_instance_requests_total",
                                  "Upstream requests sent to one instance.")),
      instance_up_(gauges(registry, "pdrouter_instance_up",
                          "1 if the instance passed its last health probe, else 0.")),
      worker_requests_(counters(registry, "pdrouter_worker_requests_total",
                                "Client requests handled, by the worker thread whose listener "
                                "accepted their connection (--threads).")) {
    // The transfer agent's note series are bounded: all of them exist from start-up.
    for (const char* kind : {"abort", "heartbeat"}) {
        for (const char* result : {"ok", "failed", "no_pdx"}) {
            transfer_notes_sent_.Add({{"kind", kind}, {"result", result}});
        }
    }
    for (const char* kind : {"done", "failed", "other"}) {
        for (const char* outcome : {"matched", "unknown", "malformed"}) {
            transfer_notes_received_.Add({{"kind", kind}, {"outcome", outcome}});
        }
    }
    auto& requests = counters(registry, "pdrouter_requests_total",
                              "Client requests answered, by route and status class.");
    auto& request_duration =
        histograms(registry, "pdrouter_request_duration_seconds",
                   "Client request duration, from the request head to the last byte sent.");
    for (std::size_t r = 0; r < kRouteCount; ++r) {
        std::string route = s(to_string(static_cast<Route>(r)));
        for (std::size_t c = 0; c < 4; ++c) {
            requests_[r][c] =
                &requests.Add({{"route", route}, {"status_class", s(kStatusClasses[c])}});
        }
        request_duration_[r] = &latency_histogram(request_duration, {{"route", route}});
    }
    auto& ttfb =
        histograms(registry, "pdrouter_time_to_first_byte_seconds",
                   "Client-visible time to first byte of the response body (TTFT for streams).");
    ttfb_[0] = &latency_histogram(ttfb, {{"route", "completions"}});
    ttfb_[1] = &latency_histogram(ttfb, {{"route", "chat_completions"}});
    auto& leg_duration =
        histograms(registry, "pdrouter_leg_duration_seconds",
                   "Duration of one upstream leg (prefill: whole leg; decode: until the last "
                   "byte).");
    auto& upstream_errors =
        counters(registry, "pdrouter_upstream_errors_total", "Upstream failures, by leg and kind.");
    auto& retries = counters(registry, "pdrouter_retries_total",
                             "Upstream attempts retried on another instance.");
    auto& mid_stream_errors =
        counters(registry, "pdrouter_mid_stream_errors_total",
                 "Upstream failures after the response head was sent to the client.");
    for (std::size_t l = 0; l < kLegCount; ++l) {
        std::string leg = s(to_string(static_cast<Leg>(l)));
        leg_duration_[l] = &latency_histogram(leg_duration, {{"leg", leg}});
        for (std::size_t k = 0; k < kUpstreamErrorKindCount; ++k) {
            upstream_errors_[l][k] = &upstream_errors.Add(
                {{"leg", leg}, {"kind", s(to_string(static_cast<UpstreamErrorKind>(k)))}});
        }
        retries_[l] = &retries.Add({{"leg", leg}});
        mid_stream_errors_[l] = &mid_stream_errors.Add({{"leg", leg}});
    }
    auto& disconnects =
        counters(registry, "pdrouter_client_disconnects_total",
                 "Clients that went away before the response ended, by the phase they left in.");
    for (std::size_t p = 0; p < kDisconnectPhaseCount; ++p) {
        disconnects_[p] =
            &disconnects.Add({{"phase", s(to_string(static_cast<DisconnectPhase>(p)))}});
    }
    auto& flows = counters(registry, "pdrouter_flow_requests_total",
                           "Generation requests started, by KV handover mode.");
    for (std::size_t m = 0; m < kFlowModeCount; ++m) {
        flows_[m] = &flows.Add({{"mode", s(to_string(static_cast<FlowMode>(m)))}});
    }
    auto& lease_refresh_requests =
        counters(registry, "pdrouter_lease_refresh_requests_total",
                 "Lease refresh requests sent to prefill instances, by result.");
    const char* results[3] = {"ok", "error", "no_route"};
    for (std::size_t i = 0; i < 3; ++i) {
        lease_refresh_requests_[i] = &lease_refresh_requests.Add({{"result", results[i]}});
    }
    add_each(kv_ready_notifications_,
             counters(registry, "pdrouter_kv_ready_notifications_total",
                      "LMCache KV-ready notifications received, by outcome."),
             "outcome", kKvReadyOutcomes);
    add_each(kv_ready_malformed_,
             counters(registry, "pdrouter_kv_ready_malformed_total",
                      "LMCache KV-ready messages that were not a notification, by reason."),
             "reason", kKvReadyMalformedReasons);
    add_each(kv_ready_evictions_,
             counters(registry, "pdrouter_kv_ready_evictions_total",
                      "Entries evicted from the LMCache kv-ready table, by reason."),
             "reason", kKvReadyEvictions);
    auto& policy_picks = counters(registry, "pdrouter_policy_picks_total",
                                  "Instances chosen, by role and selection policy.");
    for (std::size_t r = 0; r < kRoleCount; ++r) {
        for (std::size_t p = 0; p < kPolicyCount; ++p) {
            policy_picks_[r][p] = &policy_picks.Add(
                {{"role", s(to_string(static_cast<Role>(r)))},
                 {"policy", s(config::to_string(static_cast<config::Policy>(p)))}});
        }
    }
    auto& legs_failed_on_down =
        counters(registry, "pdrouter_legs_failed_on_down_total",
                 "Upstream legs ended when their instance failed a health check, because they "
                 "had received nothing for the probe's timeout, by role.");
    for (std::size_t r = 0; r < kRoleCount; ++r) {
        legs_failed_on_down_[r] =
            &legs_failed_on_down.Add({{"role", s(to_string(static_cast<Role>(r)))}});
    }
    constexpr std::string_view kDirectReasons[] = {"short_prompt", "no_prefill"};
    add_each(direct_requests_,
             counters(registry, "pdrouter_direct_requests_total",
                      "Generation requests served by a decode instance alone, by reason."),
             "reason", kDirectReasons);
    add_each(kv_ready_timeouts_,
             counters(registry, "pdrouter_kv_ready_timeouts_total",
                      "LMCache requests whose wait for KV-ready notifications timed out, by what "
                      "the router did then."),
             "policy", kKvReadyTimeoutPolicies);
    add_each(kv_ready_forwards_,
             counters(registry, "pdrouter_kv_ready_forwarded_total",
                      "KV-ready notifications for another router replica's requests, or "
                      "forwarded here by one, by result."),
             "result", kKvReadyForwards);
    add_each(kv_ready_refused_,
             counters(registry, "pdrouter_kv_ready_refused_total",
                      "Connections to the LMCache kv-ready socket refused at the handshake, by "
                      "reason: an address not in --kv-ready-allow, or a CURVE key not allowed."),
             "reason", kKvReadyRefusedReasons);
    auto& resolutions = counters(registry, "pdrouter_discovery_resolutions_total",
                                 "DNS discovery lookups, by what they discover and result.");
    auto& discovered = gauges(registry, "pdrouter_discovery_addresses",
                              "Addresses the last successful DNS discovery lookup gave, by what "
                              "it discovers.");
    for (std::size_t r = 0; r < kDiscoveryRoleCount; ++r) {
        for (std::size_t x = 0; x < kDiscoveryResultCount; ++x) {
            resolutions_[r][x] = &resolutions.Add(
                {{"role", s(kDiscoveryRoles[r])}, {"result", s(kDiscoveryResults[x])}});
        }
        discovered_[r] = &discovered.Add({{"role", s(kDiscoveryRoles[r])}});
    }
    auto& instances =
        gauges(registry, "pdrouter_instances", "Configured instances, by role and health.");
    const char* health[2] = {"up", "down"};
    for (std::size_t r = 0; r < kRoleCount; ++r) {
        for (std::size_t h = 0; h < 2; ++h) {
            instances_[r][h] = &instances.Add(
                {{"role", s(to_string(static_cast<Role>(r)))}, {"health", health[h]}});
        }
    }
    gauges(registry, "pdrouter_build_info", "Build information; the value is always 1.")
        .Add({{"version", PDR_VERSION}})
        .Set(1);
}

void RouterMetrics::request_done(Route route, int status) noexcept {
    requests_[idx(route)][status_index(status)]->Increment();
}

void RouterMetrics::request_done(Route route, int status, double seconds) noexcept {
    request_done(route, status);
    request_duration_[idx(route)]->Observe(seconds);
}

void RouterMetrics::first_byte(Route route, double seconds) noexcept {
    if (route == Route::Completions) {
        ttfb_[0]->Observe(seconds);
    }
    if (route == Route::ChatCompletions) {
        ttfb_[1]->Observe(seconds);
    }
}

void RouterMetrics::leg_done(Leg leg, double seconds) noexcept {
    leg_duration_[idx(leg)]->Observe(seconds);
}

void RouterMetrics::upstream_error(Leg leg, UpstreamErrorKind kind) noexcept {
    upstream_errors_[idx(leg)][idx(kind)]->Increment();
}

void RouterMetrics::retry(Leg leg) noexcept {
    retries_[idx(leg)]->Increment();
}

void RouterMetrics::client_disconnect(DisconnectPhase phase) noexcept {
    disconnects_[idx(phase)]->Increment();
}

void RouterMetrics::mid_stream_error(Leg leg) noexcept {
    mid_stream_errors_[idx(leg)]->Increment();
}

void RouterMetrics::policy_pick(Role role, config::Policy policy) noexcept {
    policy_picks_[idx(role)][static_cast<std::size_t>(policy)]->Increment();
}

void RouterMetrics::legs_failed_on_down(Role role, std::size_t n) noexcept {
    legs_failed_on_down_[idx(role)]->Increment(static_cast<double>(n));
}

void RouterMetrics::direct_request(DirectReason reason) noexcept {
    direct_requests_[idx(reason)]->Increment();
}

void RouterMetrics::flow_started(FlowMode mode) noexcept {
    flows_[idx(mode)]->Increment();
}

void RouterMetrics::lease_refresh_request(LeaseRefreshResult result) noexcept {
    lease_refresh_requests_[static_cast<std::size_t>(result)]->Increment();
}

void RouterMetrics::kv_ready_notification(KvReadyOutcome outcome) noexcept {
    kv_ready_notifications_[idx(outcome)]->Increment();
}

void RouterMetrics::kv_ready_malformed(KvReadyMalformed reason) noexcept {
    kv_ready_notifications_[idx(KvReadyOutcome::Malformed)]->Increment();
    kv_ready_malformed_[idx(reason)]->Increment();
}

void RouterMetrics::kv_ready_evicted(KvReadyEviction reason, double n) noexcept {
    kv_ready_evictions_[idx(reason)]->Increment(n);
}

void RouterMetrics::kv_ready_timeout(KvReadyTimeoutPolicy policy) noexcept {
    kv_ready_timeouts_[idx(policy)]->Increment();
}

void RouterMetrics::kv_ready_forward(KvReadyForward result) noexcept {
    kv_ready_forwards_[idx(result)]->Increment();
}

void RouterMetrics::kv_ready_refused(KvReadyRefused reason) noexcept {
    kv_ready_refused_[idx(reason)]->Increment();
}

void RouterMetrics::discovery_resolution(DiscoveryRole role, DiscoveryResult result,
                                         std::size_t addresses) noexcept {
    resolutions_[idx(role)][idx(result)]->Increment();
    if (result != DiscoveryResult::Failed) {
        discovered_[idx(role)]->Set(static_cast<double>(addresses));
    }
}

void RouterMetrics::bad_request(std::string_view code) {
    bad_requests_.Add({{"code", s(code)}}).Increment();
}

void RouterMetrics::admin_request(std::string_view action, std::string_view result) {
    admin_requests_.Add({{"action", s(action)}, {"result", s(result)}}).Increment();
}

Counter& RouterMetrics::worker_requests(std::size_t worker) {
    return worker_requests_.Add({{"worker", std::to_string(worker)}});
}

void RouterMetrics::transfer_note_sent(std::string_view kind, std::string_view result) {
    transfer_notes_sent_.Add({{"kind", s(kind)}, {"result", s(result)}}).Increment();
}

void RouterMetrics::transfer_note_received(std::string_view kind, std::string_view outcome) {
    transfer_notes_received_.Add({{"kind", s(kind)}, {"outcome", s(outcome)}}).Increment();
}

InstanceMetrics RouterMetrics::instance(Role role, std::string_view instance) {
    const Labels labels{{"role", s(to_string(role))}, {"instance", s(instance)}};
    InstanceMetrics series{instance_in_flight_.Add(labels), instance_requests_.Add(labels),
                           instance_up_.Add(labels)};
    set_instance_visible(labels, true);
    return series;
}

void RouterMetrics::remove_instance(Role role, std::string_view instance) {
    set_instance_visible({{"role", s(to_string(role))}, {"instance", s(instance)}}, false);
}

void RouterMetrics::set_instance_visible(const Labels& labels, bool visible) {
    if (visible) {
        registry_.show(instance_in_flight_, labels);
        registry_.show(instance_requests_, labels);
        registry_.show(instance_up_, labels);
        return;
    }
    registry_.hide(instance_in_flight_, labels);
    registry_.hide(instance_requests_, labels);
    registry_.hide(instance_up_, labels);
}

void RouterMetrics::set_instance_counts(Role role, std::size_t up, std::size_t down) noexcept {
    instances_[idx(role)][0]->Set(static_cast<double>(up));
    instances_[idx(role)][1]->Set(static_cast<double>(down));
}

}  // namespace pdr::metrics
