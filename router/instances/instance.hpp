#pragma once
// One upstream engine instance (prefill or decode) as the router sees it, and the RAII guard
// that counts a request in flight on it. Instances live in shared_ptrs owned by the Registry
// (and by whoever holds an InFlight), so their address stays stable after an admin remove.
// Fields set at insertion (role, name, public_name, endpoint, kv, upstream_key) never change;
// the others change and are read only under SharedLock (net/common/shared_state.hpp).
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include "config/config.hpp"
#include "config/role.hpp"

#include "net/common/io.hpp"
#include "net/upstream/client.hpp"
#include "router/metrics/metrics.hpp"

namespace pdr::instances {

using ::pdr::Role;
inline constexpr std::size_t kRoleCount = 2;

// The routers a request went through, in order, comma-separated (their ids), on every request
// and probe a router sends: a router that finds its own id refuses the request (508: a loop, one
// of its instances is itself or leads back to it).
inline constexpr std::string_view kHopHeader = "X-Pdrouter-Hop";

std::string_view to_string(Role r) noexcept;  // "prefill" / "decode"
bool parse_role(std::string_view s, Role& out) noexcept;

// An instance's KV coordinates for the modes that need them (PROTOCOLS.md §5-6).
struct InstanceKv {
    config::LmcacheReceiver lmcache;  // decode, lmcache mode: its KV receiver
    int kv_ready_expected = 0;        // prefill, lmcache mode: notifications per request (0: D's
                                      // TP size)
    config::PushCoords push;          // prefill, push mode: engine id, side channel, TP/PP
};

struct Instance {
    Role role = Role::Prefill;
    std::string name;  // canonical "host:port" / "[v6]:port"
    // Set by the Registry: "prefill-N" / "decode-N" with --hide-instance-addresses (N in order
    // of addition per role, never reused), else `name`. Read it through client_name().
    std::string public_name;
    upstream::Endpoint endpoint;
    InstanceKv kv;
    bool up = true;  // false after a failure, until a probe succeeds
    // Half-open: up again after a probe, until its first request ends well. Meanwhile it takes
    // one request at a time, and one failure takes it down again.
    bool on_trial = false;
    bool removed = false;  // removed via admin API: no new picks, in-flight finish
    // Set on removal: called when the last request in flight on a removed instance ends, so the
    // registry drops it (and its metric series) then, not at its next health tick.
    std::function<void()> on_drained;
    std::size_t in_flight = 0;
    std::size_t load = 0;  // in-flight weight the policies compare (router/instances/policy.hpp)
    std::string source = "static";  // where it came from: static | admin | dns:<name>
    // Whether requests and probes to it carry --upstream-api-key: false for an admin-added
    // instance outside --instance-allow.
    bool upstream_key = true;
    std::uint64_t requests = 0, failures = 0;
    int consecutive_errors = 0;  // 5xx answers or broken exchanges in a row (reset by success)
    std::string last_error;

    // Health-check state (owned by the Registry's health loop).
    Duration backoff{0};             // current re-probe delay while down
    Clock::time_point next_probe{};  // when the health loop probes this instance next
    bool probing = false;            // a probe is running now
    std::string down_reason;         // why it went down (logged once per transition)

    // Per-instance metric series (pdrouter_instance_*); null in a default-made Instance.
    metrics::Gauge* in_flight_gauge = nullptr;
    metrics::Counter* requests_counter = nullptr;
    metrics::Gauge* up_gauge = nullptr;

    // How everything the client port serves names it (GET /status, the instance label of
    // GET /metrics, error bodies and events). Logs and the admin API use `name`.
    const std::string& client_name() const noexcept {
        return public_name.empty() ? name : public_name;
    }
};
using InstancePtr = std::shared_ptr<Instance>;

// Move-only: counts one request in flight on an instance (+1 request in its totals, + `weight`
// to its load) from construction until destruction. Keeps the instance alive, so a removed
// instance can finish.
class InFlight {
public:
    InFlight() = default;
    explicit InFlight(InstancePtr inst, std::size_t weight = 1);
    InFlight(InFlight&& o) noexcept : inst_(std::move(o.inst_)), weight_(o.weight_) {}
    InFlight& operator=(InFlight&& o) noexcept;
    InFlight(const InFlight&) = delete;
    InFlight& operator=(const InFlight&) = delete;
    ~InFlight() { release(); }

    const InstancePtr& instance() const noexcept { return inst_; }
    explicit operator bool() const noexcept { return inst_ != nullptr; }
    void release() noexcept;  // ends the count now (idempotent)

private:
    InstancePtr inst_;
    std::size_t weight_ = 1;
};

}  // namespace pdr::instances
