// LeaseKeeper: batched KV lease refreshes per prefill instance, and forwarding of decode
// instances' refreshes (PROTOCOLS.md §3).
#include "router/kv/lease_keeper.hpp"

#include <algorithm>
#include <chrono>
#include <string>
#include <unordered_set>
#include <utility>
#include <variant>

#include <boost/asio/deferred.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/experimental/parallel_group.hpp>
#include <nlohmann/json.hpp>

#include "net/common/log.hpp"
#include "net/common/shared_state.hpp"

namespace pdr::kv {

namespace {
constexpr std::string_view kLog = "lease";

Duration period_of(const config::Config& cfg) {
    return std::max<Duration>(cfg.kv_lease_timeout / 3, Duration{1});
}
}  // namespace

std::string_view LeaseKeeper::to_string(Route r) noexcept {
    switch (r) {
        case Route::Unknown:
            return "unknown";
        case Route::Http:
            return "http";
        case Route::TransferAgent:
            return "transfer_agent";
        case Route::Absent:
            return "absent";
        case Route::Off:
            return "off";
    }
    return "unknown";
}

LeaseKeeper::Route LeaseKeeper::route(const std::string& authority) const {
    SharedLock lock;
    if (!enabled_) {
        return Route::Off;
    }
    auto it = routes_.find(authority);
    return it == routes_.end() ? Route::Unknown : it->second.route;
}

void LeaseKeeper::recheck_route(const std::string& authority) {
    SharedLock lock;
    auto it = routes_.find(authority);
    if (it == routes_.end()) {
        return;
    }
    if (it->second.route == Route::Absent) {
        --absent_;
        metrics_.lease_route_absent.Set(static_cast<double>(absent_));
        PDR_INFO(kLog, "prefill instance " + authority +
                           " came back or was added again: its lease-refresh route is asked "
                           "again at the next refresh");
    }
    routes_.erase(it);
}

bool LeaseKeeper::skip_route(const std::string& key, Clock::time_point now) const {
    auto it = routes_.find(key);
    return it != routes_.end() && it->second.route == Route::Absent && now < it->second.recheck_at;
}

void LeaseKeeper::learn_route(const std::string& key, Route r) {
    RouteState& st = routes_[key];
    const Route was = st.route;
    st.route = r;
    if (r == Route::Absent) {
        st.recheck_at = Clock::now() + cfg_.lease_route_recheck;
    }
    if (was == r) {
        return;
    }
    if (r == Route::Absent) {
        ++absent_;
        const auto seconds =
            std::chrono::duration_cast<std::chrono::seconds>(cfg_.lease_route_recheck).count();
        PDR_WARN(kLog, "prefill instance " + key +
                           " has no /internal/nixl/lease_refresh route (404/405): it keeps its "
                           "KV leases itself (merged vLLM: the decode renews them with NIXL "
                           "heartbeats, kv_lease_duration). The router stops refreshing it and "
                           "asks again in " +
                           std::to_string(seconds) +
                           " s (--lease-route-recheck-ms) or when it comes back from down");
    } else if (was == Route::Absent) {
        --absent_;
        PDR_INFO(kLog, "prefill instance " + key + " serves lease refreshes again (" +
                           std::string(to_string(r)) + ")");
    }
    metrics_.lease_route_absent.Set(static_cast<double>(absent_));
}

LeaseKeeper::Hold::Hold(Hold&& o) noexcept
    : keeper_(std::exchange(o.keeper_, nullptr)), token_(o.token_) {}

LeaseKeeper::Hold& LeaseKeeper::Hold::operator=(Hold&& o) noexcept {
    if (this != &o) {
        reset();
        keeper_ = std::exchange(o.keeper_, nullptr);
        token_ = o.token_;
    }
    return *this;
}

Clock::time_point LeaseKeeper::Hold::lease_until() const {
    SharedLock lock;
    return keeper_->entries_.at(token_).confirmed + keeper_->cfg_.kv_lease_timeout;
}

void LeaseKeeper::Hold::first_byte() {
    if (keeper_ != nullptr) {
        keeper_->stop_refreshing(token_);
    }
}

void LeaseKeeper::Hold::reset() {
    if (auto* k = std::exchange(keeper_, nullptr)) {
        k->release(token_);
    }
}

LeaseKeeper::LeaseKeeper(net::any_io_executor ex, upstream::Client& client,
                         metrics::RouterMetrics& m, const config::Config& cfg)
    : ex_(std::move(ex)),
      client_(client),
      metrics_(m),
      cfg_(cfg),
      enabled_(cfg.lease_refresh),
      period_(period_of(cfg)),
      tick_timer_(ex_),
      tasks_(ex_) {}

LeaseKeeper::~LeaseKeeper() {
    stop();
}

LeaseKeeper::Hold LeaseKeeper::hold(std::string p_request_id, const upstream::Endpoint& prefill,
                                    bool with_key) {
    SharedLock lock;
    if (!enabled_) {
        return Hold{};
    }
    const std::uint64_t token = next_token_++;
    std::string key = prefill.authority();
    auto [git, created] = groups_.try_emplace(key);
    Group& g = git->second;
    if (created) {
        g.endpoint = prefill;
        g.with_key = with_key;
    } else {
        g.with_key = g.with_key && with_key;  // the same address re-added outside the allow list
    }
    if (g.refreshing.empty()) {
        g.due = Clock::now() + period_;
    }
    g.refreshing.insert(token);
    ++g.holds;
    by_id_.emplace(p_request_id, token);
    entries_.emplace(token, Entry{std::move(p_request_id), std::move(key), true, Clock::now()});
    ++refreshing_;
    metrics_.kv_handles_held.Set(static_cast<double>(refreshing_));
    return Hold(this, token);
}

void LeaseKeeper::stop_refreshing(std::uint64_t token) {
    SharedLock lock;
    auto it = entries_.find(token);
    if (it == entries_.end() || !it->second.refreshing) {
        return;
    }
    it->second.refreshing = false;
    groups_.at(it->second.p_key).refreshing.erase(token);
    --refreshing_;
    metrics_.kv_handles_held.Set(static_cast<double>(refreshing_));
}

void LeaseKeeper::release(std::uint64_t token) {
    SharedLock lock;
    stop_refreshing(token);
    auto it = entries_.find(token);
    if (it == entries_.end()) {
        return;
    }
    auto [first, last] = by_id_.equal_range(it->second.id);
    for (auto i = first; i != last; ++i) {
        if (i->second == token) {
            by_id_.erase(i);
            break;
        }
    }
    const std::string key = std::move(it->second.p_key);
    entries_.erase(it);
    auto git = groups_.find(key);
    if (git != groups_.end()) {
        --git->second.holds;
        maybe_erase_group(key);
    }
}

void LeaseKeeper::maybe_erase_group(const std::string& key) {
    auto it = groups_.find(key);
    if (it != groups_.end() && it->second.holds == 0 && !it->second.in_progress) {
        groups_.erase(it);
    }
}

upstream::Request LeaseKeeper::make_post(const std::vector<std::string>& ids, bool with_key) const {
    upstream::Request req{http::verb::post, "/internal/nixl/lease_refresh", 11};
    req.set(http::field::content_type, "application/json");
    req.set(http::field::user_agent, "pdrouter");
    if (with_key && !cfg_.upstream_api_key.empty()) {
        req.set(http::field::authorization, "Bearer " + cfg_.upstream_api_key);
    }
    req.body() = nlohmann::json{{"request_ids", ids}}.dump();
    req.prepare_payload();
    return req;
}

awaitable<bool> LeaseKeeper::post_batches(upstream::Endpoint ep, std::vector<std::string> ids,
                                          bool count_sent, bool with_key) {
    const std::string key = ep.authority();
    if (renewer_ != nullptr) {
        const bool renewed = co_await renewer_->renew(ep, ids);
        if (renewed) {
            learn_route(key, Route::TransferAgent);
            if (count_sent) {
                metrics_.lease_refresh_sent.Increment(static_cast<double>(ids.size()));
            }
            co_return true;
        }
    }
    const upstream::Timeouts t{cfg_.connect_timeout, cfg_.connect_timeout + period_,
                               cfg_.connect_timeout + period_};
    bool all_ok = true;
    for (std::size_t at = 0; at < ids.size(); at += kMaxBatch) {
        const auto end = std::min(ids.size(), at + kMaxBatch);
        std::vector<std::string> batch(ids.begin() + static_cast<std::ptrdiff_t>(at),
                                       ids.begin() + static_cast<std::ptrdiff_t>(end));
        auto req = make_post(batch, with_key);
        auto res = co_await client_.request(ep, std::move(req), t);
        if (res.failure == upstream::Failure::Canceled) {
            co_return false;  // stop() / caller gone
        }
        const unsigned status = res.ok() ? res.response.result_int() : 0;
        if (status == 404 || status == 405) {
            // No such route: the engine keeps its leases itself. Nothing was refreshed.
            metrics_.lease_refresh_request(metrics::RouterMetrics::LeaseRefreshResult::NoRoute);
            learn_route(key, Route::Absent);
            co_return false;
        }
        const bool ok = res.ok() && status >= 200 && status < 300;
        metrics_.lease_refresh_request(ok ? metrics::RouterMetrics::LeaseRefreshResult::Ok
                                          : metrics::RouterMetrics::LeaseRefreshResult::Error);
        if (count_sent) {
            metrics_.lease_refresh_sent.Increment(static_cast<double>(batch.size()));
        }
        if (ok) {
            learn_route(key, Route::Http);
        } else {
            all_ok = false;
            std::string why = res.ok() ? "HTTP " + std::to_string(status)
                                       : std::string(upstream::to_string(res.failure));
            PDR_WARN(kLog, "lease refresh of " + std::to_string(batch.size()) + " id(s) on " +
                               ep.authority() + " failed: " + why);
        }
    }
    co_return all_ok;
}

void LeaseKeeper::start() {
    if (started_ || stopped_ || !enabled_) {
        return;
    }
    started_ = true;
    tasks_.spawn(refresh_loop());
}

void LeaseKeeper::stop() {
    if (stopped_) {
        return;
    }
    stopped_ = true;
    tick_timer_.cancel();
    tasks_.stop();
}

awaitable<void> LeaseKeeper::refresh_loop() {
    const TaskGroup::Alive alive = tasks_.alive();
    const Duration tick = std::max<Duration>(period_ / 4, Duration{1});
    while (!stopped_) {
        const auto now = Clock::now();
        for (auto& [key, g] : groups_) {
            if (g.in_progress || g.refreshing.empty() || g.due > now || skip_route(key, now)) {
                continue;
            }
            std::vector<std::string> ids;
            std::vector<std::uint64_t> tokens(g.refreshing.begin(), g.refreshing.end());
            ids.reserve(tokens.size());
            for (auto token : tokens) {
                ids.push_back(entries_.at(token).id);
            }
            std::sort(ids.begin(), ids.end());
            ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
            g.in_progress = true;
            g.due = now + period_;
            tasks_.spawn(refresh_group(key, std::move(ids), std::move(tokens)));
        }
        tick_timer_.expires_after(tick);
        co_await tick_timer_.async_wait();
        if (!alive) {
            co_return;
        }
    }
}

awaitable<void> LeaseKeeper::refresh_group(std::string key, std::vector<std::string> ids,
                                           std::vector<std::uint64_t> tokens) {
    const TaskGroup::Alive alive = tasks_.alive();
    const upstream::Endpoint ep = groups_.at(key).endpoint;
    const bool with_key = groups_.at(key).with_key;
    const Clock::time_point sent = Clock::now();
    const bool all_ok = co_await post_batches(ep, std::move(ids), true, with_key);
    if (!alive) {
        co_return;
    }
    if (all_ok) {
        // P extended these leases at the latest when it got the refresh.
        for (auto token : tokens) {
            auto e = entries_.find(token);
            if (e != entries_.end()) {
                e->second.confirmed = std::max(e->second.confirmed, sent);
            }
        }
    }
    auto it = groups_.find(key);
    if (it == groups_.end()) {
        co_return;
    }
    it->second.in_progress = false;
    maybe_erase_group(key);
}

// forward()'s POSTs, one per P, at once; ends when all have ended.
awaitable<void> LeaseKeeper::post_all(std::vector<awaitable<bool>> posts) {
    using Op = decltype(net::co_spawn(ex_, std::declval<awaitable<bool>>(), net::deferred));
    std::vector<Op> ops;
    ops.reserve(posts.size());
    for (auto& p : posts) {
        ops.push_back(net::co_spawn(ex_, std::move(p), net::deferred));
    }
    auto group = net::experimental::make_parallel_group(std::move(ops));
    co_await group.async_wait(net::experimental::wait_for_all(), use_tuple);
}

awaitable<LeaseKeeper::ForwardResult> LeaseKeeper::forward(const std::vector<std::string>& ids) {
    ForwardResult r;
    struct ToP {
        upstream::Endpoint endpoint;
        bool with_key = true;
        std::vector<std::string> ids;
    };
    std::unordered_map<std::string, ToP> by_p;
    std::unordered_set<std::string_view> seen;  // an id listed twice counts (and goes) once
    seen.reserve(ids.size());
    for (const auto& id : ids) {
        if (!seen.insert(id).second) {
            continue;
        }
        auto it = by_id_.find(id);
        if (it == by_id_.end()) {
            ++r.unknown;
            continue;
        }
        const std::string& key = entries_.at(it->second).p_key;
        if (skip_route(key, Clock::now())) {
            ++r.no_route;
            continue;
        }
        auto [pit, created] = by_p.try_emplace(key);
        if (created) {
            const Group& g = groups_.at(key);
            pit->second.endpoint = g.endpoint;
            pit->second.with_key = g.with_key;
        }
        pit->second.ids.push_back(id);
        ++r.forwarded;
    }
    metrics_.lease_refresh_forwarded.Increment(static_cast<double>(r.forwarded));
    metrics_.lease_refresh_unknown.Increment(static_cast<double>(r.unknown));
    if (by_p.empty()) {
        co_return r;
    }

    std::vector<awaitable<bool>> posts;
    posts.reserve(by_p.size());
    for (auto& entry : by_p) {
        ToP& to = entry.second;
        posts.push_back(
            post_batches(std::move(to.endpoint), std::move(to.ids), false, to.with_key));
    }
    if (!tasks_.stopped()) {
        using namespace net::experimental::awaitable_operators;
        co_await (post_all(std::move(posts)) || tasks_.until_stopped());
    }
    co_return r;
}

}  // namespace pdr::kv
