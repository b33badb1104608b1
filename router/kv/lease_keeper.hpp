#pragma once
// LeaseKeeper (PROTOCOLS.md §3): keeps a prefill instance's KV blocks alive while the router
// holds their handle and the decode leg has not produced its first byte, and forwards decode
// instances' lease refreshes to the prefill instance that holds each id.
//
// One timer loop ticks every period/4 (period = cfg.kv_lease_timeout / 3). Each P with
// refreshing ids has its own due time, set one period after its first id was held and one
// period after each refresh; when due, all of that P's ids go out in batched POSTs
// {P}/internal/nixl/lease_refresh {"request_ids": [...]} (at most kMaxBatch ids each), in a
// coroutine of its own so a slow P never delays another. Shared by the router's worker threads:
// its executor is the control executor (net/common/shared_state.hpp; its handlers hold
// SharedLock); hold(), first_byte(), lease_until() and ~Hold() take SharedLock and are O(1);
// workers co_spawn forward() on the control executor.
//
// A P that answers 404/405 on the route has none (merged vLLM: D renews P's leases with NIXL
// "HB:" notifications, vllm#41383): the keeper logs it once, stops posting to it, and asks again
// after cfg.lease_route_recheck or when recheck_route() says the instance came back or was
// added again. Its leases are then never taken as refreshed (lease_until() stays at P's answer
// plus the declared lease).
//
// Lifetime: Holds must not outlive the LeaseKeeper; call stop() and let the io_context finish
// before destroying it.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "config/config.hpp"
#include "net/common/io.hpp"
#include "net/common/task_group.hpp"
#include "net/upstream/client.hpp"
#include "router/metrics/router_metrics.hpp"

namespace pdr::kv {

// Renews leases on P some other way than the HTTP post (the router's transfer agent: Heartbeat
// notes to engines that embed pdx).
class LeaseRenewer {
public:
    virtual ~LeaseRenewer() = default;
    // True when the renewal of every id went out to P; false: the LeaseKeeper posts over HTTP.
    virtual awaitable<bool> renew(const upstream::Endpoint& prefill,
                                  const std::vector<std::string>& ids) = 0;
};

class LeaseKeeper {
public:
    static constexpr std::size_t kMaxBatch = 1000;  // ids per POST

    LeaseKeeper(net::any_io_executor ex, upstream::Client& client, metrics::RouterMetrics& m,
                const config::Config& cfg);
    ~LeaseKeeper();
    LeaseKeeper(const LeaseKeeper&) = delete;
    LeaseKeeper& operator=(const LeaseKeeper&) = delete;

    // Move-only RAII: destruction = decode leg over → stop refreshing AND forget the id.
    class Hold {
    public:
        Hold() = default;
        Hold(Hold&& o) noexcept;
        Hold& operator=(Hold&& o) noexcept;
        Hold(const Hold&) = delete;
        Hold& operator=(const Hold&) = delete;
        ~Hold() { reset(); }

        // The decode leg produced its first byte: stop refreshing (the id stays known to
        // forward() until the Hold is destroyed). Idempotent.
        void first_byte();
        void reset();  // same as destruction
        bool active() const noexcept { return keeper_ != nullptr; }
        // Until when P is known to hold the blocks: the hold's start (P's answer) or the last
        // refresh P acknowledged, plus the lease. Only meaningful while active().
        Clock::time_point lease_until() const;

    private:
        friend class LeaseKeeper;
        Hold(LeaseKeeper* keeper, std::uint64_t token) : keeper_(keeper), token_(token) {}
        LeaseKeeper* keeper_ = nullptr;
        std::uint64_t token_ = 0;
    };

    // Keeps P's blocks for `p_request_id` alive (refreshed every period until first_byte() or
    // destruction). With cfg.lease_refresh false, returns an inactive no-op Hold.
    // `with_key` false (a prefill outside --instance-allow, Instance::upstream_key): its refreshes
    // carry no --upstream-api-key.
    Hold hold(std::string p_request_id, const upstream::Endpoint& prefill, bool with_key = true);

    struct ForwardResult {
        std::size_t forwarded = 0, unknown = 0;
        std::size_t no_route = 0;  // held, but their P has no lease-refresh route: not posted
    };
    // The router's own POST /internal/nixl/lease_refresh: each id held now (before or after
    // first byte) goes to the P that prefilled it, one batched POST per P, concurrently.
    // Unknown ids are counted (pdrouter_lease_refresh_unknown_total), not errors.
    awaitable<ForwardResult> forward(const std::vector<std::string>& ids);

    std::size_t held() const noexcept { return refreshing_; }       // ids being refreshed now
    std::size_t known() const noexcept { return entries_.size(); }  // Holds alive
    Duration period() const noexcept { return period_; }

    // How the leases on the P at `authority` ("host:port") are renewed, as far as the keeper
    // knows: GET /instances and /status show it.
    enum class Route {
        Unknown,        // no refresh went to it yet
        Http,           // it answered a refresh POST with 2xx
        TransferAgent,  // renewed with the transfer agent's Heartbeat notes
        Absent,         // it answered 404/405: not posted to until asked again
        Off,            // --no-lease-refresh
    };
    static std::string_view to_string(Route r) noexcept;
    Route route(const std::string& authority) const;
    // The instance at `authority` was added, or came back from down: a restarted engine may
    // serve the route now, so the next refresh asks it again.
    void recheck_route(const std::string& authority);

    // Refreshes go through `renewer` first (nullable; it must outlive the refreshes: stop()).
    void set_renewer(LeaseRenewer* renewer) noexcept { renewer_ = renewer; }

    void start();  // starts the refresh loop
    void stop();   // cancels the loop and running refreshes

private:
    struct Entry {
        std::string id;
        std::string p_key;  // authority of P
        bool refreshing = true;
        Clock::time_point confirmed;  // hold start, then the send time of each acknowledged refresh
    };
    struct Group {  // one per P with at least one Hold alive
        upstream::Endpoint endpoint;
        std::unordered_set<std::uint64_t> refreshing;  // tokens
        std::size_t holds = 0;                         // entries (refreshing or not)
        Clock::time_point due{};
        bool in_progress = false;
        bool with_key = true;  // refreshes carry --upstream-api-key
    };
    struct RouteState {
        Route route = Route::Unknown;
        Clock::time_point recheck_at{};  // Absent: when to ask again
    };
    // True when P at `key` is known to lack the route and is not due for a re-check.
    bool skip_route(const std::string& key, Clock::time_point now) const;
    void learn_route(const std::string& key, Route r);
    void stop_refreshing(std::uint64_t token);
    void release(std::uint64_t token);
    void maybe_erase_group(const std::string& key);
    upstream::Request make_post(const std::vector<std::string>& ids, bool with_key) const;
    awaitable<bool> post_batches(upstream::Endpoint ep, std::vector<std::string> ids,
                                 bool count_sent, bool with_key);
    awaitable<void> refresh_loop();
    awaitable<void> refresh_group(std::string key, std::vector<std::string> ids,
                                  std::vector<std::uint64_t> tokens);
    awaitable<void> post_all(std::vector<awaitable<bool>> posts);

    net::any_io_executor ex_;
    upstream::Client& client_;
    metrics::RouterMetrics& metrics_;
    const config::Config& cfg_;
    const bool enabled_;
    const Duration period_;

    std::uint64_t next_token_ = 1;
    std::unordered_map<std::uint64_t, Entry> entries_;
    std::unordered_multimap<std::string, std::uint64_t> by_id_;
    std::unordered_map<std::string, Group> groups_;
    // By P authority: an entry is made by a refresh answer and dropped by recheck_route() (the
    // address added again or back from down); a removed instance's entry stays, so the map holds
    // at most one entry per prefill address ever refreshed.
    std::unordered_map<std::string, RouteState> routes_;
    std::size_t absent_ = 0;  // routes_ entries that are Absent
    std::size_t refreshing_ = 0;
    LeaseRenewer* renewer_ = nullptr;

    Timer tick_timer_;
    bool started_ = false;
    bool stopped_ = false;
    // The refresh loop and its POSTs; stop() cancels them (and forward()'s POSTs, which race the
    // stop). Last member: destroyed first, so a task resuming later touches nothing.
    TaskGroup tasks_;
};

}  // namespace pdr::kv
