// The route handlers of App other than dispatch and admin: generation, models, health, status,
// metrics and the lease-refresh forwarder.
#include "net/common/fields.hpp"
#include "net/common/log.hpp"
#include "net/common/log_limit.hpp"
#include "net/common/shared_state.hpp"
#include "router/api/admin.hpp"
#include "router/api/app.hpp"
#include "router/api/validate.hpp"
#include "router/api/worker.hpp"
#include "router/disagg/attempts.hpp"
#include "router/disagg/run_flow.hpp"
#include "router/kv/control_agent.hpp"
#include "router/kv/kv_ready_forwarder.hpp"
#include "router/kv/kv_ready_listener.hpp"

#include <algorithm>
#include <atomic>
#include <mutex>

namespace pdr::api {

namespace {

constexpr std::string_view kLog = "api";

// Anyone can send bad requests: one line per second per error code, with the client's address.
void log_bad_request(const TrackedExchange& ex, const ValidationError& err) {
    static LogLimiter limiter;
    std::string note;
    if (log::level() <= log::Level::Info && limiter.allow(error_info(err.errc).code, note)) {
        std::string line = "bad request: ";
        line.append(error_info(err.errc).code)
            .append(": ")
            .append(err.message)
            .append(" client=")
            .append(ex.remote_address())
            .append(note);
        log::write(log::Level::Info, kLog, line, ex.request_id());
    }
}

// Counts a generation request in flight (router-wide limit and gauge), across the workers:
// taken() is false when `max` were in flight already (nothing is counted then).
class GenerationSlot {
public:
    GenerationSlot(std::atomic<std::size_t>& count, std::size_t max, metrics::Gauge& gauge)
        : count_(count), gauge_(gauge) {
        std::size_t now = count_.load();
        while (now < max) {
            if (count_.compare_exchange_weak(now, now + 1)) {
                taken_ = true;
                gauge_.Increment();
                return;
            }
        }
    }
    ~GenerationSlot() {
        if (taken_) {
            --count_;
            gauge_.Decrement();
        }
    }
    GenerationSlot(const GenerationSlot&) = delete;
    GenerationSlot& operator=(const GenerationSlot&) = delete;
    bool taken() const noexcept { return taken_; }

private:
    std::atomic<std::size_t>& count_;
    metrics::Gauge& gauge_;
    bool taken_ = false;
};

// Claims a request id for as long as its request is in flight, on any worker; claimed() is
// false when another request in flight holds it. `id` must outlive the claim. Released by key:
// an insert that rehashes the set invalidates its iterators.
class RequestIdClaim {
public:
    RequestIdClaim(std::mutex& m, std::unordered_set<std::string>& ids, const std::string& id)
        : mutex_(m), ids_(ids), id_(id) {
        const std::lock_guard<std::mutex> lock(mutex_);
        claimed_ = ids_.insert(id).second;
    }
    ~RequestIdClaim() {
        if (claimed_) {
            const std::lock_guard<std::mutex> lock(mutex_);
            ids_.erase(id_);
        }
    }
    RequestIdClaim(const RequestIdClaim&) = delete;
    RequestIdClaim& operator=(const RequestIdClaim&) = delete;
    bool claimed() const noexcept { return claimed_; }

private:
    std::mutex& mutex_;
    std::unordered_set<std::string>& ids_;
    const std::string& id_;
    bool claimed_ = false;
};

awaitable<void> respond_json(server::Exchange& ex, unsigned status, const disagg::Json& body) {
    co_await server::respond_relayed(ex, status, "application/json", disagg::dump(body));
}

}  // namespace

awaitable<bool> App::refuse_loop(TrackedExchange& ex) {
    if (!disagg::is_hop_loop(ex.request(), router_id_)) {
        co_return false;
    }
    router_metrics_.bad_request(error_info(Errc::LoopDetected).code);
    // Any client can send the header: one line a second, the header cut to its first 200 bytes.
    static LogLimiter limiter;
    std::string note;
    if (limiter.allow("loop", note)) {
        constexpr std::size_t kShown = 200;
        const std::string_view hops = ex.request()[instances::kHopHeader];
        PDR_WARN(kLog,
                 "refused a request that already went through this router (X-Pdrouter-Hop: " +
                     std::string(hops.substr(0, kShown)) + (hops.size() > kShown ? "..." : "") +
                     "): one of its instances is the router itself, or leads back to it; check "
                     "--prefill/--decode, discovery and /instances; client=" +
                     ex.remote_address() + note,
                 ex.request_id());
    }
    co_await server::respond_error(
        ex, Errc::LoopDetected,
        "this request already went through this router: an instance it routes to is the router "
        "itself (or another router that routes back to it); fix the instance list");
    co_return true;
}

awaitable<void> App::handle_generation(TrackedExchange& ex, RouteId id, std::string_view path,
                                       Clock::time_point started, Worker& w) {
    if (shutting_down_) {
        co_await server::respond_error(ex, Errc::ShuttingDown, "the router is shutting down");
        co_return;
    }
    GenerationSlot slot(generations_in_flight_, cfg_.max_concurrent_requests,
                        router_metrics_.requests_in_flight);
    if (!slot.taken()) {
        router_metrics_.bad_request(error_info(Errc::TooManyRequests).code);
        static LogLimiter limiter;  // overload: one line a second
        std::string note;
        if (limiter.allow("max_concurrent", note)) {
            PDR_INFO(kLog, "rejected: max_concurrent_requests reached" + note, ex.request_id());
        }
        co_await server::respond_error(ex, Errc::TooManyRequests,
                                       "too many concurrent requests (max_concurrent_requests=" +
                                           std::to_string(cfg_.max_concurrent_requests) + ")");
        co_return;
    }
    if (co_await refuse_loop(ex)) {
        co_return;
    }
    const server::Request& request = ex.request();
    // The id is the engines' request id on both legs: two requests in flight with one id would
    // collide there (the second prefill replaces the first's KV blocks).
    RequestIdClaim id_claim(request_ids_mutex_, request_ids_in_flight_, ex.request_id());
    if (!id_claim.claimed()) {
        router_metrics_.bad_request(error_info(Errc::DuplicateRequestId).code);
        PDR_INFO(kLog, "rejected: X-Request-Id already in flight", ex.request_id());
        co_await server::respond_error(
            ex, Errc::DuplicateRequestId,
            "X-Request-Id '" + ex.request_id() +
                "' is already used by a request in flight; request ids must be unique",
            std::string(kRequestIdHeader));
        co_return;
    }
    ParsedGeneration parsed;
    const GenerationKind kind =
        id == RouteId::Completions ? GenerationKind::Completions : GenerationKind::ChatCompletions;
    ValidationError err = validate_generation(
        kind, wire::field_value(request, http::field::content_type), request.body(), parsed);
    if (!err.ok()) {
        router_metrics_.bad_request(error_info(err.errc).code);
        log_bad_request(ex, err);
        co_await server::respond_error(ex, err.errc, err.message, err.param);
        co_return;
    }
    disagg::FlowRequest req{ex,
                            metrics_route(id),
                            std::string(path),
                            ex.request_id(),
                            request.body(),
                            std::move(parsed.body),
                            parsed.stream,
                            started,
                            disagg::leg_headers(request, cfg_.upstream_api_key, router_id_)};
    co_await disagg::run_flow(w.deps, req);
}

awaitable<void> App::handle_models(TrackedExchange& ex, Worker& w) {
    // A model list, not a generation: a decode that stalls on it gets a probe's time, not
    // --decode-timeout-ms, before the next one is asked.
    co_await forward_to_one(ex, w, Role::Decode, http::verb::get, "/v1/models", {},
                            registry_.probe_timeouts(), "models");
}

awaitable<void> App::handle_pass_through(TrackedExchange& ex, Worker& w) {
    const server::Request& request = ex.request();
    const http::verb verb =
        request.method() == http::verb::head ? http::verb::get : request.method();
    if (verb == http::verb::post) {
        const std::string_view ct = wire::field_value(request, http::field::content_type);
        if (!disagg::is_json_content_type(ct)) {
            router_metrics_.bad_request(error_info(Errc::UnsupportedMediaType).code);
            co_await server::respond_error(
                ex, Errc::UnsupportedMediaType,
                "Content-Type must be application/json, got '" + std::string(ct) + "'");
            co_return;
        }
    }
    // Embeddings and scores compute like a prefill: the decode leg's deadlines, not a probe's.
    const upstream::Timeouts timeouts =
        verb == http::verb::get
            ? registry_.probe_timeouts()
            : upstream::Timeouts{cfg_.connect_timeout, cfg_.decode_timeout, cfg_.decode_timeout};
    co_await forward_to_one(ex, w, cfg_.pass_through_role, verb, origin_form(request.target()),
                            std::string(request.body()), timeouts, "pass-through");
}

awaitable<void> App::forward_to_one(TrackedExchange& ex, Worker& w, Role role, http::verb verb,
                                    std::string_view target, std::string body,
                                    upstream::Timeouts timeouts, std::string_view what) {
    if (co_await refuse_loop(ex)) {
        co_return;
    }
    const metrics::Leg leg = role == Role::Prefill ? metrics::Leg::Prefill : metrics::Leg::Decode;
    const std::string_view role_name = role == Role::Prefill ? "prefill" : "decode";
    const disagg::LegHeaders headers =
        disagg::leg_headers(ex.request(), cfg_.upstream_api_key, router_id_);
    disagg::InstanceAttempts tries(
        registry_, role, role == Role::Prefill ? cfg_.prefill_retries : cfg_.decode_retries);
    upstream::Failure last_failure = upstream::Failure::None;
    while (instances::InstancePtr inst = tries.next()) {
        // Counted like a leg: in flight, and in the instance's request total (its failures are).
        const bool last = tries.last();
        upstream::PreparedRequest req =
            disagg::make_leg_request(verb, target, ex.request_id(), headers,
                                     last ? std::move(body) : body, inst->upstream_key);
        upstream::Result res = co_await w.client.request(inst->endpoint, std::move(req), timeouts);
        if (res.failure == upstream::Failure::Canceled || ex.client_gone()) {
            router_metrics_.client_disconnect(metrics::DisconnectPhase::Decode);
            co_return;
        }
        if (!res.ok()) {
            last_failure = res.failure;
            router_metrics_.upstream_error(leg, disagg::error_kind_for(res.failure));
            const std::string reason = disagg::describe_failure(cfg_, res.failure, res.ec);
            tries.failed(inst->client_name() + " " + reason);
            registry_.report_leg_failure(*inst, res.failure, reason);
            // A GET is asked again after any failure; a POST (an embedding, a score: work the
            // engine may have done) only when nothing was sent.
            const bool unsent = res.failure == upstream::Failure::Connect ||
                                res.failure == upstream::Failure::ConnectTimeout;
            if (!last && (verb == http::verb::get || unsent)) {
                disagg::log_retry(ex, ex.request_id(), what, inst->name, reason);
                continue;
            }
            disagg::log_failure(ex, ex.request_id(), what, inst->name, reason);
            co_await server::respond_error(
                ex, disagg::errc_for(res.failure),
                std::string(role_name) + " instance " + tries.last_error());
            co_return;
        }
        const unsigned status = res.response.result_int();
        if (status >= 500) {
            router_metrics_.upstream_error(leg, metrics::UpstreamErrorKind::Status5xx);
            disagg::log_failure(ex, ex.request_id(), what, inst->name,
                                "status " + std::to_string(status));
        }
        const std::string_view ct = wire::field_value(res.response, http::field::content_type);
        const std::string_view retry_after =
            wire::field_value(res.response, http::field::retry_after);
        co_await server::respond_relayed(ex, status, ct, std::move(res.response.body()),
                                         retry_after);
        co_return;
    }
    if (tries.tried() == 0) {
        router_metrics_.upstream_error(leg, metrics::UpstreamErrorKind::NoInstance);
        co_await server::respond_error(
            ex, role == Role::Prefill ? Errc::NoPrefillInstance : Errc::NoDecodeInstance,
            "no healthy " + std::string(role_name) + " instance");
    } else {
        disagg::log_failure(ex, ex.request_id(), what, tries.last_failed(),
                            "last try: " + tries.last_error());
        co_await server::respond_error(ex, disagg::errc_for(last_failure),
                                       std::string(role_name) + " instance " + tries.last_error());
    }
}

awaitable<void> App::handle_health(TrackedExchange& ex) {
    const std::size_t p_up = registry_.count(instances::Role::Prefill, true);
    const std::size_t d_up = registry_.count(instances::Role::Decode, true);
    const bool ok = p_up > 0 && d_up > 0 && !shutting_down_;
    disagg::Json body = disagg::Json::object();
    body["status"] = ok ? "ok" : "unavailable";
    body["prefill_instances"] = p_up;
    body["decode_instances"] = d_up;
    if (!ok) {
        std::string reason;
        if (shutting_down_) {
            reason = "the router is shutting down";
        } else if (p_up == 0 && d_up == 0) {
            reason = "no healthy prefill instance and no healthy decode instance";
        } else {
            reason = p_up == 0 ? "no healthy prefill instance" : "no healthy decode instance";
        }
        body["reason"] = reason;
    }
    co_await respond_json(ex, ok ? 200 : 503, body);
}

awaitable<void> App::handle_status(TrackedExchange& ex) {
    disagg::Json body = status_body();
    co_await respond_json(ex, 200, body);
}

disagg::Json App::status_body() {
    using instances::Role;
    SharedLock lock;  // one consistent view of the shared state
    auto names = [this](Role role) {
        disagg::Json list = disagg::Json::array();
        for (const auto& inst : registry_.list(role)) {
            list.push_back(inst->client_name());
        }
        return list;
    };
    disagg::Json body = disagg::Json::object();
    body["prefill_node_count"] = registry_.count(Role::Prefill, false);
    body["decode_node_count"] = registry_.count(Role::Decode, false);
    body["prefill_nodes"] = names(Role::Prefill);
    body["decode_nodes"] = names(Role::Decode);
    body["prefill_nodes_up"] = registry_.count(Role::Prefill, true);
    body["decode_nodes_up"] = registry_.count(Role::Decode, true);
    body["mode"] = config::to_string(cfg_.kv_mode);
    body["model"] = cfg_.model.empty() ? disagg::Json(nullptr) : disagg::Json(cfg_.model);
    body["requests_in_flight"] = generations_in_flight_.load();
    body["kv_handles_held"] = lease_keeper_.held();
    {
        // How each prefill's leases are kept alive (kv::LeaseKeeper::Route).
        disagg::Json leases = disagg::Json::array();
        for (const auto& p : registry_.list(Role::Prefill)) {
            leases.push_back(
                {{"name", p->client_name()},
                 {"lease_refresh", kv::LeaseKeeper::to_string(lease_keeper_.route(p->name))}});
        }
        body["prefill_leases"] = std::move(leases);
    }
    if (cfg_.kv_mode == config::KvMode::Push) {
        // push mode: each prefill's KV coordinates (what D is sent to register its blocks).
        disagg::Json coords = disagg::Json::array();
        for (const auto& p : registry_.list(Role::Prefill)) {
            const config::PushCoords& c = p->kv.push;
            disagg::Json entry = {{"name", p->client_name()},
                                  {"engine_id", c.engine_id},
                                  {"tp_size", c.tp_size},
                                  {"pp_size", c.pp_size}};
            if (!cfg_.hide_instance_addresses) {
                entry["kv_host"] = c.kv_host.empty() ? p->endpoint.host : c.kv_host;
                entry["side_channel_port"] = c.side_channel_port;
            }
            coords.push_back(std::move(entry));
        }
        body["prefill_kv"] = std::move(coords);
    }
    if (control_agent_) {
        body["transfer_agent"] = {{"running", control_agent_->running()},
                                  {"prefill_peers", control_agent_->peers()}};
    }
    if (kv_ready_) {
        // lmcache mode: where notifications go, and the decode instances it cannot use.
        body["kv_ready_endpoint"] = kv_ready_->endpoint();
        body["kv_ready_pending"] = kv_ready_->table().size();
        if (kv_forwarder_) {
            body["replica_id"] = kv_forwarder_->self_id();
            body["peer_routers"] = kv_forwarder_->peers();
        }
        disagg::Json unusable = disagg::Json::array();
        for (const auto& d : registry_.list(Role::Decode)) {
            if (d->kv.lmcache.empty()) {
                unusable.push_back({{"name", d->client_name()},
                                    {"reason",
                                     "no LMCache receiver ports (lmcache_init_ports / "
                                     "lmcache_alloc_ports): never chosen"}});
            }
        }
        body["decode_nodes_unusable"] = std::move(unusable);
    }
    body["worker_threads"] = workers_.size();
    body["version"] = config::version();
    return body;
}

awaitable<void> App::handle_metrics(TrackedExchange& ex) {
    std::size_t buffered = 0;
    std::size_t waiting = 0;
    for (const auto& w : workers_) {
        buffered += w->server->buffered_body_bytes();
        waiting += w->server->body_budget_waiters();
    }
    {
        const std::lock_guard<std::mutex> lock(lock_waits_mutex_);
        const SharedLockWaits waits = shared_lock_waits();
        lock_spins_->Increment(static_cast<double>(waits.spun - lock_spins_seen_));
        lock_blocks_->Increment(static_cast<double>(waits.blocked - lock_blocks_seen_));
        lock_spins_seen_ = waits.spun;
        lock_blocks_seen_ = waits.blocked;
    }
    router_metrics_.request_body_buffered.Set(static_cast<double>(buffered));
    router_metrics_.request_body_waiting.Set(static_cast<double>(waiting));
    co_await server::respond_relayed(ex, 200, metrics::Registry::kContentType,
                                     metrics_registry_.render());
}

awaitable<void> App::handle_lease_refresh(TrackedExchange& ex) {
    // An admin route: its answer tells which ids are in flight, and a large body costs the
    // event loop.
    const bool admitted =
        co_await admit_admin(ex, "lease_refresh", router_metrics_, cfg_.admin_api_key);
    if (!admitted) {
        co_return;
    }
    std::vector<std::string> ids;
    const ValidationError err = parse_lease_refresh(ex.request().body(), ids);
    if (!err.ok()) {
        router_metrics_.bad_request(error_info(err.errc).code);
        log_bad_request(ex, err);
        co_await server::respond_error(ex, err.errc, err.message, err.param);
        co_return;
    }
    // The lease keeper is shared: its forward runs on the control executor.
    auto forward = on_control(executor_, lease_keeper_.forward(ids));
    const kv::LeaseKeeper::ForwardResult r = co_await std::move(forward);
    disagg::Json out = disagg::Json::object();
    out["forwarded"] = r.forwarded;
    out["unknown"] = r.unknown;
    out["no_route"] = r.no_route;
    co_await respond_json(ex, 200, out);
}

}  // namespace pdr::api
