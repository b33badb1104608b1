#pragma once
// The pdrouter application: wires config → upstream client → instance registry → lease keeper
// → HTTP servers, and dispatches every request to its route handler.
//
// Threads (--threads N): N workers each run an io_context with their own listener on the same
// port (SO_REUSEPORT: the kernel spreads connections), their own upstream connection pools and
// their own FlowDeps; a request lives on the worker that accepted its connection. Worker 0 runs
// on the io_context of the thread that calls run(), beside the control executor: the shared
// state (registry and health loop, lease keeper, KV-ready listener, transfer agent, discovery)
// runs there, on a LockedExecutor, and workers reach it through SharedLock or by co_spawning a
// coroutine there (net/common/shared_state.hpp). Metrics are atomics.
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

#include <atomic>
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_set>
#include <vector>

namespace pdr::kv {
class KvReadyForwarder;
class KvReadyListener;
class ControlAgent;
}  // namespace pdr::kv

namespace pdr::api {

// The concurrency hint of the router's io_contexts (the control one and each worker's): one
// thread runs each, and no other thread starts, cancels or closes an operation on their sockets
// (work for another thread is posted to its executor), so the reactor's per-socket locks are
// not needed; the scheduler keeps its lock, for those posts. A lock and an unlock fewer at each
// socket operation and each readiness event (docs/benchmarks.md).
inline constexpr int kIoConcurrencyHint = BOOST_ASIO_CONCURRENCY_HINT_UNSAFE_IO;

class App {
public:
    // Adds cfg.prefill / cfg.decode to the registry. Nothing runs until listen()/start().
    // `control`: the io_context the caller runs (the control executor and worker 0);
    // `workers`: data-path threads, at least 1 (worker_threads()).
    App(net::io_context& control, config::Config cfg, std::size_t workers);
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
    // Binds cfg.host:cfg.port, one listener per worker (throws std::system_error on failure);
    // returns the bound port.
    unsigned short listen();
    // Starts the worker threads, accepting, the health loop and the lease keeper.
    void start();
    // Stops accepting, lets in-flight requests finish for up to `grace`, stops background work.
    // Run it on the control executor.
    awaitable<void> shutdown(Duration grace);
    // Ends a running shutdown's grace now (a second signal).
    void end_grace();
    // After shutdown and the control io_context's end: stops and joins the worker threads.
    void join_workers();

    // The control executor: its handlers hold SharedLock.
    const net::any_io_executor& control_executor() const noexcept { return executor_; }
    std::size_t workers() const noexcept { return workers_.size(); }

    const config::Config& config() const noexcept { return cfg_; }
    // A configured instance that is this router's own listen address (after listen()), or "".
    std::string self_instance() const;
    metrics::RouterMetrics& metrics() noexcept { return router_metrics_; }
    instances::Registry& registry() noexcept { return registry_; }
    kv::LeaseKeeper& lease_keeper() noexcept { return lease_keeper_; }
    std::size_t generations_in_flight() const noexcept { return generations_in_flight_; }

private:
    struct Worker;
    // The request handler (what a worker's server calls for each request).
    awaitable<void> handle(server::Exchange& ex, Worker& w);
    awaitable<void> dispatch(TrackedExchange& ex, const RouteMatch& route,
                             Clock::time_point started, Worker& w);
    awaitable<void> handle_generation(TrackedExchange& ex, RouteId id, std::string_view path,
                                      Clock::time_point started, Worker& w);
    awaitable<void> handle_models(TrackedExchange& ex, Worker& w);
    // /tokenize, /version, /v1/embeddings, ...: to one healthy --pass-through-role instance.
    awaitable<void> handle_pass_through(TrackedExchange& ex, Worker& w);
    // `verb target body` to one healthy instance of `role` (retried per the role's retries: a
    // GET after any failure, a POST only when nothing was sent), its answer relayed as it is.
    awaitable<void> forward_to_one(TrackedExchange& ex, Worker& w, Role role, http::verb verb,
                                   std::string_view target, std::string body,
                                   upstream::Timeouts timeouts, std::string_view what);
    awaitable<void> handle_health(TrackedExchange& ex);
    awaitable<void> handle_status(TrackedExchange& ex);
    disagg::Json status_body();
    awaitable<void> handle_metrics(TrackedExchange& ex);
    awaitable<void> handle_lease_refresh(TrackedExchange& ex);
    // A request that carries this router's id in X-Pdrouter-Hop: answers 508, true.
    awaitable<bool> refuse_loop(TrackedExchange& ex);

    config::Config cfg_;
    std::string router_id_;  // X-Pdrouter-Hop
    net::io_context& control_ioc_;
    net::any_io_executor executor_;  // the control executor (locked)
    metrics::Registry metrics_registry_;
    metrics::RouterMetrics router_metrics_;
    // pdrouter_shared_lock_waits_total{how="spin"|"block"}, brought up to shared_lock_waits()
    // at each scrape.
    metrics::Counter* lock_spins_ = nullptr;
    metrics::Counter* lock_blocks_ = nullptr;
    std::mutex lock_waits_mutex_;
    std::uint64_t lock_spins_seen_ = 0;
    std::uint64_t lock_blocks_seen_ = 0;
    upstream::Client client_;  // the control plane's: probes, lease refreshes, descriptor fetches
    instances::Registry registry_;
    // Before the lease keeper: its refreshes may use the agent until the keeper is gone.
    std::unique_ptr<kv::ControlAgent> control_agent_;  // --transfer-agent only
    instances::Discovery discovery_;                   // --prefill-dns / --decode-dns
    kv::LeaseKeeper lease_keeper_;
    std::unique_ptr<kv::KvReadyForwarder> kv_forwarder_;  // lmcache with a replica id only
    std::unique_ptr<kv::KvReadyListener> kv_ready_;       // lmcache mode only
    std::atomic<std::size_t> generations_in_flight_{0};
    std::mutex request_ids_mutex_;
    std::unordered_set<std::string> request_ids_in_flight_;  // generation requests' ids
    std::atomic<bool> shutting_down_{false};
    // Last: destroyed first, while what their pending work refers to still exists.
    std::vector<std::unique_ptr<Worker>> workers_;
};

}  // namespace pdr::api
