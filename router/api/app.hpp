#pragma once
// The pdrouter application: wires config → upstream client → instance registry → lease keeper
// → HTTP server, and dispatches every request to its route handler. Everything runs on one
// io_context thread (the data path); only metrics are shared with other threads.
#include "config/config.hpp"
#include "net/server/http_server.hpp"
#include "net/upstream/client.hpp"
#include "router/api/routes.hpp"
#include "router/api/tracked_exchange.hpp"
#include "router/disagg/flow.hpp"
#include "router/instances/discovery.hpp"
#include "router/instances/registry.hpp"
#include "router/kv/lease_keeper.hpp"
#include "router/metrics/metrics.hpp"
#include "router/metrics/router_metrics.hpp"

#include <cstddef>
#include <memory>
#include <string>
#include <unordered_set>

namespace pdr::kv {
class KvReadyForwarder;
class KvReadyListener;
class ControlAgent;
}  // namespace pdr::kv

namespace pdr::api {

class App {
public:
    // Adds cfg.prefill / cfg.decode to the registry. Nothing runs until listen()/start().
    App(net::any_io_executor executor, config::Config cfg);
    ~App();
    App(const App&) = delete;
    App& operator=(const App&) = delete;

    // When cfg.model is set: checks that every configured instance serves it (false on a
    // mismatch; unreachable instances are kept). True when no model is configured.
    awaitable<bool> probe_instances();

    // lmcache mode: binds the KV-ready PULL socket (cfg.kv_ready_bind). False with a message in
    // `error` when it cannot; true at once in the other modes.
    bool bind_kv_ready(std::string& error);
    // --transfer-agent: starts the router's transfer agent. False with a message in `error`
    // when it cannot (no UCX); true at once without the flag.
    bool start_transfer_agent(std::string& error);
    // Binds cfg.host:cfg.port (throws std::system_error on failure); returns the bound port.
    unsigned short listen();
    // Starts accepting, the health loop and the lease keeper.
    void start();
    // Stops accepting, lets in-flight requests finish for up to `grace`, stops background work.
    awaitable<void> shutdown(Duration grace);
    // Ends a running shutdown's grace now (a second signal).
    void end_grace() { server_->end_grace(); }

    // The request handler (what the server calls for each request).
    awaitable<void> handle(server::Exchange& ex);

    const config::Config& config() const noexcept { return cfg_; }
    // A configured instance that is this router's own listen address (after listen()), or "".
    std::string self_instance() const;
    metrics::RouterMetrics& metrics() noexcept { return router_metrics_; }
    instances::Registry& registry() noexcept { return registry_; }
    kv::LeaseKeeper& lease_keeper() noexcept { return lease_keeper_; }
    std::size_t generations_in_flight() const noexcept { return generations_in_flight_; }

private:
    awaitable<void> dispatch(TrackedExchange& ex, const RouteMatch& route,
                             Clock::time_point started);
    awaitable<void> handle_generation(TrackedExchange& ex, RouteId id, std::string_view path,
                                      Clock::time_point started);
    awaitable<void> handle_models(TrackedExchange& ex);
    awaitable<void> handle_health(TrackedExchange& ex);
    awaitable<void> handle_status(TrackedExchange& ex);
    awaitable<void> handle_metrics(TrackedExchange& ex);
    awaitable<void> handle_lease_refresh(TrackedExchange& ex);
    // A request that carries this router's id in X-Pdrouter-Hop: answers 508, true.
    awaitable<bool> refuse_loop(TrackedExchange& ex);

    config::Config cfg_;
    std::string router_id_;  // X-Pdrouter-Hop
    net::any_io_executor executor_;
    metrics::Registry metrics_registry_;
    metrics::RouterMetrics router_metrics_;
    upstream::Client client_;
    instances::Registry registry_;
    // Before the lease keeper: its refreshes may use the agent until the keeper is gone.
    std::unique_ptr<kv::ControlAgent> control_agent_;  // --transfer-agent only
    instances::Discovery discovery_;                   // --prefill-dns / --decode-dns
    kv::LeaseKeeper lease_keeper_;
    std::unique_ptr<kv::KvReadyForwarder> kv_forwarder_;  // lmcache with a replica id only
    std::unique_ptr<kv::KvReadyListener> kv_ready_;       // lmcache mode only
    disagg::FlowDeps deps_;
    std::unique_ptr<server::HttpServer> server_;
    std::size_t generations_in_flight_ = 0;
    std::unordered_set<std::string> request_ids_in_flight_;  // generation requests' ids
    bool shutting_down_ = false;
};

}  // namespace pdr::api
