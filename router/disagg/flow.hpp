#pragma once
// What every flow needs: the shared services (FlowDeps), one client request as the flows see it
// (FlowRequest), the client-gone wiring (UpstreamCanceler) and the small helpers that turn
// upstream failures into metrics, log lines and OpenAI-style answers.
#include "config/config.hpp"
#include "net/common/error.hpp"
#include "net/common/io.hpp"
#include "net/server/http_server.hpp"
#include "net/upstream/client.hpp"
#include "router/disagg/rewrite.hpp"
#include "router/instances/registry.hpp"
#include "router/kv/lease_keeper.hpp"
#include "router/metrics/router_metrics.hpp"

#include <memory>
#include <string>
#include <string_view>

namespace pdr::disagg {

inline constexpr std::string_view kLogComponent = "flow";

struct FlowDeps {
    instances::Registry& registry;
    upstream::Client& client;
    kv::LeaseKeeper& lease_keeper;
    metrics::RouterMetrics& metrics;
    const config::Config& cfg;
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
};

// Wires Exchange::on_client_gone to the upstream response stream that is open right now, so a
// client disconnect closes the upstream connection at once. Holds its state in a shared_ptr:
// the callback stays valid even if it runs late.
class UpstreamCanceler {
public:
    explicit UpstreamCanceler(server::Exchange& ex);
    ~UpstreamCanceler();
    UpstreamCanceler(const UpstreamCanceler&) = delete;
    UpstreamCanceler& operator=(const UpstreamCanceler&) = delete;

    // The stream to cancel on disconnect (null: none). Call set(nullptr) before destroying it.
    void set(upstream::ResponseStream* stream) noexcept;
    bool gone() const noexcept;

private:
    struct State {
        upstream::ResponseStream* stream = nullptr;
        bool gone = false;
    };
    std::shared_ptr<State> state_;
};

using upstream::errc_for;  // upstream failure → what the client is told
metrics::UpstreamErrorKind error_kind_for(upstream::Failure f) noexcept;

double seconds_since(Clock::time_point t) noexcept;

// Sends a router-made OpenAI error (no-op when the client is gone or a response has started).
awaitable<void> respond_error(server::Exchange& ex, Errc e, std::string_view message,
                              std::string_view param = {});
// Relays an upstream answer as it is: status, content type, body, and the upstream's
// Retry-After when it sent one (a 429 or 503 that says when to come back).
awaitable<void> respond_relayed(server::Exchange& ex, unsigned status,
                                std::string_view content_type, std::string body,
                                std::string_view retry_after = {});

// One warn line for a failed request: "request failed: leg=<leg> instance=<i> reason=<r>".
void log_failure(std::string_view request_id, std::string_view leg, std::string_view instance,
                 std::string_view reason);
// No instance of `leg`'s role is up: counts it (kind no_instance), logs it and answers 503
// no_prefill_instance / no_decode_instance.
awaitable<void> respond_no_instance(FlowDeps& deps, FlowRequest& req, metrics::Leg leg);
// One warn line for a leg attempt that failed and is retried on another instance (the request
// goes on): "leg attempt failed, retrying on another instance: leg=... instance=... reason=...".
void log_retry(std::string_view request_id, std::string_view leg, std::string_view instance,
               std::string_view reason);

}  // namespace pdr::disagg
