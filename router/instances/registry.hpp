#pragma once
// The instance registry: the prefill and decode instances the router may use, their health,
// round-robin selection, in-flight accounting and the admin add/remove operations
// (PROTOCOLS.md §6). Shared by the router's worker threads: its executor is the control
// executor (net/common/shared_state.hpp), whose handlers hold SharedLock, and every public
// method a worker calls takes SharedLock itself. The coroutines (add, add_discovered,
// probe_all_at_startup) run on the control executor: workers co_spawn them there.
//
// Health: instances start up (a router started before its engines still tries them). A leg that
// cannot connect or times out marks an instance down at once (report_failure), 3 other errors in
// a row do (report_error); the health loop re-probes down
// instances with exponential backoff (1 s, 2 s, 4 s ... capped at cfg.health_backoff_max) and up
// ones every cfg.health_interval (GET /health, falling back to GET /v1/models when /health is
// 404/405). Instances are never dropped for being down.
//
// Lifetime: call stop() and let the io_context finish its work before destroying the Registry
// (stop() cancels the health loop's timer and every running probe).
#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "config/config.hpp"
#include "net/common/error.hpp"
#include "net/common/io.hpp"
#include "net/common/task_group.hpp"
#include "net/upstream/client.hpp"
#include "router/instances/instance.hpp"
#include "router/instances/policy.hpp"
#include "router/metrics/router_metrics.hpp"

namespace pdr::instances {

// What a GET /v1/models probe found.
struct ModelProbe {
    bool ok = false;                     // reachable, 2xx, and (when parsed) a valid model list
    std::string error;                   // why not ok
    Errc errc = Errc::UpstreamProtocol;  // when not ok: connect, timeout, or a bad answer
    std::vector<std::string> models;     // data[*].id
};

// True when `served` names `wanted`: equal, or equal last path components
// ("Qwen/Qwen3-0.6B" matches "Qwen3-0.6B" and "/models/Qwen3-0.6B").
bool model_matches(std::string_view served, std::string_view wanted) noexcept;

// `ep` (of `role`, named `name`) failed a health probe: the exchanges with it on `client` that
// have received nothing for `quiet` (as long as the probe waited) are stuck with it (a stopped
// or hung engine). They end now, each as its own timeout would, so the legs' failure handling
// runs at once (an error event on a started stream, a retry or a 5xx otherwise) instead of
// after their own, much longer, timeouts; counted and logged. Legs still receiving go on. Call
// it on `client`'s thread.
void fail_stalled_legs(upstream::Client& client, metrics::RouterMetrics& metrics, Role role,
                       const std::string& name, const upstream::Endpoint& ep, Duration quiet);

class Registry {
public:
    Registry(net::any_io_executor ex, upstream::Client& client, metrics::RouterMetrics& m,
             const config::Config& cfg);
    metrics::RouterMetrics& metrics() noexcept { return metrics_; }
    // The control executor: where the coroutines below run.
    const net::any_io_executor& executor() const noexcept { return ex_; }
    ~Registry();
    Registry(const Registry&) = delete;
    Registry& operator=(const Registry&) = delete;

    // Start-up list (from flags/config file). A duplicate of an existing instance is ignored.
    void add_configured(Role role, const config::InstanceAddress& a, InstanceKv kv = {});
    // When cfg.model is set: GET /v1/models on each instance; returns false (and logs) when
    // one serves another model. Unreachable instances are logged and kept (considered up).
    awaitable<bool> probe_all_at_startup();

    struct AdminResult {
        unsigned status = 0;
        std::string body;  // the JSON to send: {"message": ...} or the OpenAI error shape
    };
    // POST /instances/add. 400 bad type/address or model mismatch; 502 probe failed (instance
    // unreachable or not a model server); 409 duplicate; 200 {"message": "Added ..."}.
    // Counts pdrouter_admin_requests_total{action="add"}.
    // `kv`: the instance's KV coordinates from the body (lmcache receiver ports...).
    awaitable<AdminResult> add(std::string_view type, std::string_view instance,
                               InstanceKv kv = {});
    // POST /instances/remove. 400 bad type/address; 404 unknown; 200 {"message": "Removed ..."}.
    // Counts pdrouter_admin_requests_total{action="remove"}.
    AdminResult remove(std::string_view type, std::string_view instance);

    // Discovery (discovery.hpp): probes `a` as add() does and inserts it with `source`; false
    // (logged) when the probe fails or it serves another model. True, adding nothing, when an
    // instance of that name is listed already.
    awaitable<bool> add_discovered(Role role, config::InstanceAddress a, std::string source);
    // Discovery: the instance gets no new requests; those in flight finish (as remove()).
    void drain(Role role, std::string_view name);

    // The role's policy (cfg.prefill_policy / cfg.decode_policy) chooses among the instances
    // that are up and not removed, skipping `exclude` and (when given) those `usable` refuses;
    // null if none. Counts pdrouter_policy_picks_total.
    InstancePtr pick(Role role, const Instance* exclude = nullptr,
                     bool (*usable)(const Instance&) = nullptr, const PickHint& hint = {});
    // Counts a request in flight on `inst`; `weight` goes to its load (PickHint::weight).
    InFlight acquire(const InstancePtr& inst, std::size_t weight = 1) {
        return InFlight(inst, weight);
    }
    // Replaces a role's policy (tests inject one with a known random source).
    void set_policy(Role role, std::unique_ptr<Policy> policy);
    // `inst` cannot be reached or is stuck (connect failure, timeout): marks it down now.
    void report_failure(Instance& inst, std::string_view reason);
    // `inst` answered a leg with a 5xx, or the exchange broke (the connection closed or failed
    // around the request, an unparsable answer): it is reachable but failing, or one connection
    // was lost. It is marked down only after kErrorsToMarkDown such errors in a row (any success
    // resets the count), so one bad request or one dropped connection cannot empty the pool.
    void report_error(Instance& inst, std::string_view reason);
    // A leg attempt failed with `f`: report_failure for a connect failure or connect timeout,
    // report_error for the rest (answer timeouts included: N in a row mark it down).
    void report_leg_failure(Instance& inst, upstream::Failure f, std::string_view reason);
    static constexpr int kErrorsToMarkDown = 3;
    // A leg succeeded on `inst` (any answer but a 5xx): resets its error count, and ends its
    // trial (back in full rotation) when it was on one.
    void report_success(Instance& inst);

    std::size_t count(Role role, bool up_only) const;  // not removed (and up, if up_only)
    // Instances that are up, not removed, and that `usable` accepts.
    std::size_t count_usable(Role role, bool (*usable)(const Instance&)) const;
    std::vector<InstancePtr> list(Role role) const;  // not removed, in insertion order
    // GET /instances: [{role,name,public_name,up,on_trial,removed,in_flight,load,source,
    // requests,failures,last_error}] —
    // also shows removed instances that still have requests in flight.
    nlohmann::json to_json() const;
    // Finds a live (not removed) instance by canonical name.
    InstancePtr find(Role role, std::string_view name) const;

    // For short GETs to an instance (health probes, /v1/models): the connect timeout, then
    // connect timeout + 2 s for the whole answer.
    upstream::Timeouts probe_timeouts() const;

    // This router: its id (sent as X-Pdrouter-Hop on probes, so a probe of itself is refused)
    // and its listen address (refused as an instance). Set once it listens.
    void set_self(std::string router_id, std::string listen_host, unsigned short port);
    // True when `a` is this router's own listen address (the same port on a loopback, the
    // listen host, or any address when it listens on all of them).
    bool is_self(const config::InstanceAddress& a) const;
    const std::string& router_id() const noexcept { return router_id_; }

    // Where the legs on an instance that failed a probe are (fail_stalled_legs): by default the
    // registry's own client; the router's workers each have their own (--threads), and the
    // handler posts the call to each of them.
    using StalledLegsHandler = std::function<void(const Instance&, Duration quiet)>;
    void set_stalled_legs_handler(StalledLegsHandler h) { stalled_handler_ = std::move(h); }
    // The health loop's tick closes the idle pooled connections that expired or that their
    // instance closed: the registry's own client's, and (this handler) the workers' pools,
    // each on its own thread.
    void set_idle_sweep_handler(std::function<void()> h) { sweep_handler_ = std::move(h); }

    // Called when an instance is inserted, or passes a probe after being down (an engine
    // restarted there may serve other routes): the lease keeper asks its route again.
    using InstanceBackHandler = std::function<void(const Instance&)>;
    void set_instance_back_handler(InstanceBackHandler h) { back_handler_ = std::move(h); }

    void start();  // starts the health loop
    void stop();   // cancels the health loop and running probes

private:
    struct ProbeOutcome {
        bool ok = false;
        std::string error;
    };
    InstancePtr insert(Role role, const config::InstanceAddress& a, InstanceKv kv);
    void prune(Role role);
    void update_counts(Role role);
    void mark_down(Instance& inst, std::string_view reason);
    // A probe of a down instance passed: up again, on trial (Instance::on_trial).
    void start_trial(Instance& inst);
    static std::string trial_reason(const Instance& inst, std::string_view reason);
    void retire(const InstancePtr& inst);  // removed: no new picks, pruned once drained
    // Parses an admin body's `type` and `instance`; on failure, the 400 answer for `action`.
    std::optional<AdminResult> parse_admin_target(std::string_view action, const std::string& type,
                                                  const std::string& instance, Role& role,
                                                  config::InstanceAddress& addr);
    AdminResult admin_result(std::string_view action, std::string_view result, unsigned status,
                             std::string body);
    // `with_key`: carries --upstream-api-key (see Instance::upstream_key).
    upstream::Request make_get(std::string_view target, bool with_key) const;
    awaitable<ModelProbe> probe_models(upstream::Endpoint ep, bool with_key = true);
    awaitable<ProbeOutcome> probe_health(upstream::Endpoint ep, bool with_key);
    awaitable<void> health_loop();
    awaitable<void> run_probe(InstancePtr inst);
    void wake_health_loop();
    void fail_stalled(const Instance& inst, Duration quiet);

    net::any_io_executor ex_;
    upstream::Client& client_;
    metrics::RouterMetrics& metrics_;
    const config::Config& cfg_;
    std::array<std::vector<InstancePtr>, kRoleCount> instances_;
    std::array<std::unique_ptr<Policy>, kRoleCount> policies_;
    // The N of the next "prefill-N" / "decode-N" (--hide-instance-addresses); never goes back.
    std::array<std::uint64_t, kRoleCount> next_public_number_{};
    std::vector<std::size_t> candidates_;  // pick()'s scratch list
    StalledLegsHandler stalled_handler_;
    std::function<void()> sweep_handler_;
    InstanceBackHandler back_handler_;
    std::string router_id_;  // set_self
    std::string listen_host_;
    unsigned short listen_port_ = 0;

    Timer health_timer_;  // the health loop sleeps on it; cancel() wakes it to re-plan
    bool started_ = false;
    bool stopped_ = false;
    // The health loop and its probes; stop() cancels them. Last member: destroyed first, so a
    // task resuming later sees its Alive token false and touches nothing.
    TaskGroup tasks_;
};

}  // namespace pdr::instances
