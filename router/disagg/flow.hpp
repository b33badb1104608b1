#pragma once
// What every flow needs: the shared services (FlowDeps), one client request as the flows see it
// (FlowRequest), and the small helpers that turn upstream failures into metrics, log lines and
// answers. The flows themselves: run_flow.hpp.
#include "config/config.hpp"
#include "net/common/error.hpp"
#include "net/common/io.hpp"
#include "net/server/reply.hpp"
#include "net/upstream/client.hpp"
#include "router/disagg/rewrite.hpp"
#include "router/instances/registry.hpp"
#include "router/kv/lease_keeper.hpp"
#include "router/metrics/router_metrics.hpp"

#include <string>
#include <string_view>

namespace pdr::kv {
class KvReadyListener;
class ControlAgent;
}  // namespace pdr::kv

namespace pdr::disagg {

inline constexpr std::string_view kLogComponent = "flow";

struct FlowDeps {
    instances::Registry& registry;
    upstream::Client& client;
    kv::LeaseKeeper& lease_keeper;
    metrics::RouterMetrics& metrics;
    const config::Config& cfg;
    kv::KvReadyListener* kv_ready = nullptr;  // the ZMQ KV-ready listener (lmcache mode only)
    kv::ControlAgent* control = nullptr;      // the router's transfer agent (--transfer-agent)
};

// One validated generation request. `body` is the scanned client body (views into raw_body).
struct FlowRequest {
    server::Exchange& exchange;
    metrics::Route route = metrics::Route::Completions;
    std::string target;           // upstream path, e.g. "/v1/completions"
    std::string request_id;       // sent on both legs and back to the client
    const std::string& raw_body;  // the client's body exactly as received
    JsonObjectView body;          // scanned client body (an object)
    bool stream = false;          // the client asked for SSE
    Clock::time_point started;    // when the router got the request
    LegHeaders headers;
    instances::PickHint prefill_hint{};  // set by run_flow from the prompt (prompt.hpp)
};

using upstream::errc_for;  // upstream failure → what the client is told
metrics::UpstreamErrorKind error_kind_for(upstream::Failure f) noexcept;

double seconds_since(Clock::time_point t) noexcept;

// Whole answers (net/server/reply.hpp), used by every flow.
using server::respond_error;
using server::respond_relayed;

// "answered HTTP <status>: <the first 200 bytes of body>" (no body part when it is empty).
std::string status_reason(unsigned status, std::string_view body);
// upstream::describe, but a body over the limit names the limit and its flag.
std::string describe_failure(const config::Config& cfg, upstream::Failure f, const error_code& ec);

// One warn line for a failed request: "request failed: leg=<leg> instance=<i> reason=<r>
// client=<address>". Anyone can make requests fail (prompts the engines refuse, an outage), so
// these lines go out at most once a second per leg and instance; the next one that does says
// how many were left out (those go out at DEBUG, and the metrics count every failure).
void log_failure(const server::Exchange& client, std::string_view request_id, std::string_view leg,
                 std::string_view instance, std::string_view reason);
inline void log_failure(const FlowRequest& req, std::string_view leg, std::string_view instance,
                        std::string_view reason) {
    log_failure(req.exchange, req.request_id, leg, instance, reason);
}
// No instance of `leg`'s role is up: counts it (kind no_instance), logs it and answers 503
// no_prefill_instance / no_decode_instance.
awaitable<void> respond_no_instance(FlowDeps& deps, FlowRequest& req, metrics::Leg leg);
// One warn line for a leg attempt that failed and is retried on another instance (the request
// goes on): "leg attempt failed, retrying on another instance: leg=... instance=... reason=...
// client=...", limited as log_failure's lines.
void log_retry(const server::Exchange& client, std::string_view request_id, std::string_view leg,
               std::string_view instance, std::string_view reason);
inline void log_retry(const FlowRequest& req, std::string_view leg, std::string_view instance,
                      std::string_view reason) {
    log_retry(req.exchange, req.request_id, leg, instance, reason);
}

}  // namespace pdr::disagg
