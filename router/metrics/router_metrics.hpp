#pragma once
// The router's named metrics (prefix `pdrouter_`, documented in docs/metrics.md), as
// prometheus-cpp families on a metrics::Registry. Series with bounded labels are created in the
// constructor and kept by reference, so the hot path never looks a series up by its labels;
// per-instance series are created by instance() when an instance appears and hidden by
// remove_instance() when it goes away. All methods are thread-safe.
#include <array>
#include <cstddef>
#include <string>
#include <string_view>
#include "config/config.hpp"
#include "config/role.hpp"

#include "router/metrics/metrics.hpp"

namespace pdr::metrics {

enum class Route {
    Completions,
    ChatCompletions,
    Models,
    Health,
    Status,
    Metrics,
    Instances,
    LeaseRefresh,
    PassThrough,
    Other,
};
inline constexpr std::size_t kRouteCount = 10;

enum class Leg { Prefill, Decode };
inline constexpr std::size_t kLegCount = 2;

enum class UpstreamErrorKind {
    Connect,
    ConnectTimeout,
    Timeout,
    IdleTimeout,
    Read,
    Write,
    Protocol,
    Status4xx,
    Status5xx,
    MissingKvParams,
    KvLeaseExpiring,  // the handle's lease would lapse before D could take it: not sent
    NoInstance,       // no instance of the leg's role was up: nothing was sent
};
inline constexpr std::size_t kUpstreamErrorKindCount = 12;

enum class DisconnectPhase { Prefill, Handover, Decode };
inline constexpr std::size_t kDisconnectPhaseCount = 3;

using ::pdr::Role;
inline constexpr std::size_t kRoleCount = 2;

enum class FlowMode { Pull, Push, Lmcache, Direct };
inline constexpr std::size_t kFlowModeCount = 4;

// LMCache "KV ready" notifications (router/kv/kv_ready_listener.hpp), by what became of each.
enum class KvReadyOutcome { Matched, Early, Duplicate, Unknown, Malformed };
inline constexpr std::size_t kKvReadyOutcomeCount = 5;
// Why a ZMQ message was not a notification.
enum class KvReadyMalformed { NotMsgpack, NotMap, NoReqId, IdTooLong, Multipart, TooLarge };
inline constexpr std::size_t kKvReadyMalformedCount = 6;
enum class KvReadyEviction { Ttl, Capacity };
inline constexpr std::size_t kKvReadyEvictionCount = 2;
// What the flow did when the wait for notifications timed out.
enum class KvReadyTimeoutPolicy { Error, Proceed };
inline constexpr std::size_t kKvReadyTimeoutPolicyCount = 2;

// What became of a KV-ready notification for a request of another router replica (or one a
// peer forwarded here): sent to its owner, received from a peer (and ours), dropped because the
// owner's queue was full, dropped because no peer has the owner's id, dropped because a
// forwarded one was not ours (never forwarded twice).
enum class KvReadyForward { Sent, Received, QueueFull, UnknownOwner, NotOwner };
inline constexpr std::size_t kKvReadyForwardCount = 5;
// Why the kv-ready socket's guard refused a connection: its address is not allowed, or its
// CURVE key is not (router/kv/kv_ready_guard.hpp).
enum class KvReadyRefused { Address, Key };
inline constexpr std::size_t kKvReadyRefusedCount = 2;
// What DNS discovery looks up: prefill or decode instances, or the router replicas' PULL
// addresses (--peer-routers-dns).
enum class DiscoveryRole { Prefill, Decode, Router };
inline constexpr std::size_t kDiscoveryRoleCount = 3;
// How one lookup went: addresses found, no such name (or no records), or the lookup failed.
enum class DiscoveryResult { Ok, Empty, Failed };
inline constexpr std::size_t kDiscoveryResultCount = 3;

// Why a request skipped disaggregation (pdrouter_direct_requests_total{reason}).
enum class DirectReason { ShortPrompt, NoPrefill };
inline constexpr std::size_t kDirectReasonCount = 2;
inline constexpr std::size_t kPolicyCount = 4;  // config::Policy values

// Label values as rendered: "completions", "chat_completions", ..., "prefill", "connect_timeout",
// "status_4xx", "handover", "lmcache", ...
std::string_view to_string(Route r) noexcept;
std::string_view to_string(Leg l) noexcept;
std::string_view to_string(UpstreamErrorKind k) noexcept;
std::string_view to_string(DisconnectPhase p) noexcept;
std::string_view to_string(Role r) noexcept;
std::string_view to_string(FlowMode m) noexcept;
std::string_view to_string(KvReadyOutcome o) noexcept;        // "matched", ..., "malformed"
std::string_view to_string(KvReadyMalformed r) noexcept;      // "not_msgpack", ..., "too_large"
std::string_view to_string(KvReadyEviction r) noexcept;       // "ttl", "capacity"
std::string_view to_string(KvReadyTimeoutPolicy p) noexcept;  // "error", "proceed"
std::string_view to_string(KvReadyForward f) noexcept;
std::string_view to_string(
    KvReadyRefused r) noexcept;  // "address", "key"        // "sent", ..., "not_owner"
std::string_view to_string(DiscoveryRole r) noexcept;    // "prefill", "decode", "router"
std::string_view to_string(DiscoveryResult r) noexcept;  // "ok", "empty", "failed"
// "2xx".."5xx"; statuses below 300 count as 2xx, 600 and above as 5xx.
std::string_view status_class(int status) noexcept;

// Per-instance series; get them once per instance (RouterMetrics::instance) and keep them.
struct InstanceMetrics {
    Gauge& in_flight;   // pdrouter_instance_in_flight{role,instance}
    Counter& requests;  // pdrouter_instance_requests_total{role,instance}
    Gauge& up;          // pdrouter_instance_up{role,instance} (0/1)
};

class RouterMetrics {
public:
    explicit RouterMetrics(Registry& registry);
    RouterMetrics(const RouterMetrics&) = delete;
    RouterMetrics& operator=(const RouterMetrics&) = delete;

    Registry& registry() noexcept { return registry_; }

    // pdrouter_requests_total{route,status_class}
    void request_done(Route route, int status) noexcept;
    // ... and pdrouter_request_duration_seconds{route}
    void request_done(Route route, int status, double seconds) noexcept;
    // pdrouter_time_to_first_byte_seconds{route}; recorded for completions/chat_completions only.
    void first_byte(Route route, double seconds) noexcept;
    // pdrouter_leg_duration_seconds{leg}
    void leg_done(Leg leg, double seconds) noexcept;
    // pdrouter_upstream_errors_total{leg,kind}
    void upstream_error(Leg leg, UpstreamErrorKind kind) noexcept;
    // pdrouter_retries_total{leg}
    void retry(Leg leg) noexcept;
    // pdrouter_client_disconnects_total{phase}
    void client_disconnect(DisconnectPhase phase) noexcept;
    // pdrouter_mid_stream_errors_total{leg}
    void mid_stream_error(Leg leg) noexcept;
    // pdrouter_flow_requests_total{mode}
    void flow_started(FlowMode mode) noexcept;
    // pdrouter_legs_failed_on_down_total{role}: `n` exchanges with an instance its health
    // check found down, ended because they had received nothing for the probe's timeout.
    void legs_failed_on_down(Role role, std::size_t n) noexcept;
    // pdrouter_policy_picks_total{role,policy}: an instance chosen by the role's policy.
    void policy_pick(Role role, config::Policy policy) noexcept;
    // pdrouter_direct_requests_total{reason="short_prompt"|"no_prefill"}
    void direct_request(DirectReason reason) noexcept;
    // pdrouter_lease_refresh_requests_total{result="ok"|"error"|"no_route"}; no_route: P answered
    // 404/405 (it has no such route: merged vLLM renews leases from D itself).
    enum class LeaseRefreshResult { Ok, Error, NoRoute };
    void lease_refresh_request(LeaseRefreshResult result) noexcept;
    // pdrouter_kv_ready_notifications_total{outcome}; a Malformed one through kv_ready_malformed.
    void kv_ready_notification(KvReadyOutcome outcome) noexcept;
    // pdrouter_kv_ready_notifications_total{outcome="malformed"} and
    // pdrouter_kv_ready_malformed_total{reason}
    void kv_ready_malformed(KvReadyMalformed reason) noexcept;
    // pdrouter_kv_ready_evictions_total{reason}
    void kv_ready_evicted(KvReadyEviction reason, double n = 1) noexcept;
    // pdrouter_kv_ready_timeouts_total{policy}: the flow's wait for notifications timed out.
    void kv_ready_timeout(KvReadyTimeoutPolicy policy) noexcept;
    // pdrouter_kv_ready_forwarded_total{result}
    void kv_ready_forward(KvReadyForward result) noexcept;
    // pdrouter_kv_ready_refused_total{reason}
    void kv_ready_refused(KvReadyRefused reason) noexcept;
    // pdrouter_discovery_resolutions_total{role,result}; on success also
    // pdrouter_discovery_addresses{role} (the addresses the lookup gave).
    void discovery_resolution(DiscoveryRole role, DiscoveryResult result,
                              std::size_t addresses) noexcept;
    // pdrouter_bad_requests_total{code} (OpenAI error code, e.g. "invalid_request_error");
    // creates the series on first use (takes the family's mutex).
    void bad_request(std::string_view code);
    // pdrouter_admin_requests_total{action,result}; action: add|remove|list,
    // result: ok|bad_request|unauthorized|forbidden|not_found|conflict|probe_failed|error.
    void admin_request(std::string_view action, std::string_view result);
    // pdrouter_transfer_notes_sent_total{kind,result}: the router agent's notes to engines;
    // kind: abort|heartbeat, result: ok|failed|no_pdx (the engine has no pdx side channel).
    void transfer_note_sent(std::string_view kind, std::string_view result);
    // pdrouter_transfer_notes_received_total{kind,outcome}: terminal notes copied by P;
    // kind: done|failed|other, outcome: matched|unknown|malformed.
    void transfer_note_received(std::string_view kind, std::string_view outcome);

    // pdrouter_instance_{in_flight,requests_total,up}{role,instance}; get-or-create (revives a
    // removed instance's series). `instance` is the InstanceAddress::text() form.
    InstanceMetrics instance(Role role, std::string_view instance);
    void remove_instance(Role role, std::string_view instance);
    // pdrouter_worker_requests_total{worker}: the series of worker `worker` (0-based), made on
    // the first call; keep the reference.
    Counter& worker_requests(std::size_t worker);
    // pdrouter_instances{role,health="up"|"down"}
    void set_instance_counts(Role role, std::size_t up, std::size_t down) noexcept;

    // Plain series, used directly.
    Gauge& requests_in_flight;         // pdrouter_requests_in_flight
    Counter& lease_refresh_sent;       // pdrouter_lease_refresh_sent_total (ids refreshed toward P)
    Counter& lease_refresh_forwarded;  // pdrouter_lease_refresh_forwarded_total
    Counter& lease_refresh_unknown;    // pdrouter_lease_refresh_unknown_total
    Gauge& kv_handles_held;            // pdrouter_kv_handles_held
    Gauge& lease_route_absent;   // pdrouter_lease_refresh_route_absent (P known without the route)
    Histogram& kv_handover_gap;  // pdrouter_kv_handover_gap_seconds (P answer → D 1st byte)
    Counter& recomputes;         // pdrouter_recomputes_total
    Counter& decode_kv_params_removed;  // pdrouter_decode_kv_params_removed_total
    Counter& kv_host_rewrites;          // pdrouter_kv_host_rewrites_total (--rewrite-kv-host)
    Counter& kv_mode_mismatches;        // pdrouter_kv_mode_mismatch_total (P answered another mode)
    Histogram& transfer_seconds;        // pdrouter_transfer_seconds (push: dispatch → P's Done)
    Counter& transfer_bytes;            // pdrouter_transfer_bytes_total (push, P's Done copies)
    Gauge& kv_ready_pending;            // pdrouter_kv_ready_pending (entries in the kv-ready table)
    Histogram& kv_ready_wait;           // pdrouter_kv_ready_wait_seconds (P answer → KV ready)
    Gauge& kv_ready_peers;              // pdrouter_kv_ready_peers (replicas we can forward to)
    Counter& kv_ready_disconnects;      // pdrouter_kv_ready_disconnects_total (sender conns ended)
    Gauge& request_body_buffered;       // pdrouter_request_body_buffered_bytes (set at scrape)
    Gauge& request_body_waiting;        // pdrouter_request_body_budget_waiting (set at scrape)

private:
    Registry& registry_;
    std::array<std::array<Counter*, 4>, kRouteCount> requests_{};
    std::array<Histogram*, kRouteCount> request_duration_{};
    std::array<Histogram*, 2> ttfb_{};  // completions, chat_completions
    std::array<Histogram*, kLegCount> leg_duration_{};
    std::array<std::array<Counter*, kUpstreamErrorKindCount>, kLegCount> upstream_errors_{};
    std::array<Counter*, kLegCount> retries_{};
    std::array<Counter*, kDisconnectPhaseCount> disconnects_{};
    std::array<Counter*, kLegCount> mid_stream_errors_{};
    std::array<Counter*, kFlowModeCount> flows_{};
    std::array<Counter*, 3> lease_refresh_requests_{};           // ok, error, no_route
    std::array<std::array<Gauge*, 2>, kRoleCount> instances_{};  // [role][up, down]
    std::array<Counter*, kKvReadyOutcomeCount> kv_ready_notifications_{};
    std::array<Counter*, kKvReadyMalformedCount> kv_ready_malformed_{};
    std::array<Counter*, kKvReadyEvictionCount> kv_ready_evictions_{};
    std::array<Counter*, kKvReadyTimeoutPolicyCount> kv_ready_timeouts_{};
    std::array<std::array<Counter*, kPolicyCount>, kRoleCount> policy_picks_{};
    std::array<Counter*, kRoleCount> legs_failed_on_down_{};
    std::array<Counter*, kDirectReasonCount> direct_requests_{};
    std::array<Counter*, kKvReadyForwardCount> kv_ready_forwards_{};
    std::array<Counter*, kKvReadyRefusedCount> kv_ready_refused_{};
    std::array<std::array<Counter*, kDiscoveryResultCount>, kDiscoveryRoleCount> resolutions_{};
    std::array<Gauge*, kDiscoveryRoleCount> discovered_{};
    // Families whose series appear on first use.
    prometheus::Family<Counter>& bad_requests_;
    prometheus::Family<Counter>& admin_requests_;
    prometheus::Family<Counter>& transfer_notes_sent_;
    prometheus::Family<Counter>& transfer_notes_received_;
    prometheus::Family<Gauge>& instance_in_flight_;
    prometheus::Family<Counter>& instance_requests_;
    prometheus::Family<Gauge>& instance_up_;
    prometheus::Family<Counter>& worker_requests_;

    void set_instance_visible(const Labels& labels, bool visible);
};

}  // namespace pdr::metrics
