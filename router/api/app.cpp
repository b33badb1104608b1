#include "router/api/app.hpp"
#include "router/api/worker.hpp"

#include "net/common/log.hpp"
#include "net/common/shared_state.hpp"
#include "net/common/uuid.hpp"
#include "router/api/admin.hpp"
#include "router/kv/control_agent.hpp"
#include "router/kv/kv_ready_forwarder.hpp"
#include "router/kv/kv_ready_listener.hpp"

#include <boost/asio/deferred.hpp>
#include <boost/asio/experimental/parallel_group.hpp>

namespace pdr::api {

namespace {

constexpr std::string_view kLog = "api";

prometheus::Family<metrics::Counter>& lock_waits_family(metrics::Registry& r) {
    return prometheus::BuildCounter()
        .Name("pdrouter_shared_lock_waits_total")
        .Help(
            "Calls into the state the worker threads share that found its lock held by "
            "another thread, by how they got it: spin (within microseconds) or block (slept "
            "in the kernel). The contention of --threads.")
        .Register(r.families());
}

// A router-wide limit split between `n` workers (each gets its share, rounded up; 0 stays 0).
std::size_t share(std::size_t limit, std::size_t n) {
    return limit == 0 ? 0 : (limit + n - 1) / n;
}

// One worker's server limits: the connection limits are router-wide (every worker's server
// counts in `counts`); the body-buffer budget is the router's divided between the workers.
server::Limits limits_from(const config::Config& cfg, std::size_t workers,
                           std::shared_ptr<server::ConnectionCounts> counts) {
    server::Limits l;
    l.max_header_bytes = cfg.max_header_bytes;
    l.max_body_bytes = cfg.max_body_bytes;
    l.max_buffered_body_bytes = share(cfg.max_buffered_body_bytes, workers);
    if (l.max_buffered_body_bytes != 0) {
        l.max_buffered_body_bytes = std::max(l.max_buffered_body_bytes, cfg.max_body_bytes);
    }
    l.read_timeout = cfg.request_read_timeout;
    l.idle_timeout = cfg.client_idle_timeout;
    l.write_timeout = cfg.client_write_timeout;
    l.max_connections = cfg.max_client_connections;
    l.reserved_probe_connections = cfg.reserved_probe_connections;
    l.max_connections_per_source = cfg.max_connections_per_source;
    l.counts = std::move(counts);
    // Liveness (the Helm chart's probe is /status: it answers while the process serves HTTP,
    // where /health is 503 without instances), readiness and scraping keep working with every
    // client slot taken.
    l.is_probe = [](const http::request_header<>& h) {
        const RouteMatch m = match_route(h.method(), h.target());
        return m.kind == RouteMatch::Kind::Found &&
               (m.id == RouteId::Health || m.id == RouteId::Status || m.id == RouteId::Metrics);
    };
    return l;
}

}  // namespace

App::Worker::Worker(App& app, std::size_t number, net::io_context* control)
    : own_ioc(control == nullptr ? std::make_unique<net::io_context>(kIoConcurrencyHint) : nullptr),
      ioc(control != nullptr ? *control : *own_ioc),
      ex(ioc.get_executor()),
      client(ex, upstream::PoolLimits{.idle_ttl = app.cfg_.upstream_idle_timeout,
                                      .max_response_body = app.cfg_.max_upstream_body_bytes}),
      deps{app.registry_,           client,   app.lease_keeper_,
           app.router_metrics_,     app.cfg_, app.kv_ready_.get(),
           app.control_agent_.get()},
      requests(app.router_metrics_.worker_requests(number)) {}

App::App(net::io_context& control, config::Config cfg, std::size_t workers)
    : cfg_(std::move(cfg)),
      router_id_(make_uuid_v4()),
      control_ioc_(control),
      executor_(locked_executor(control)),
      router_metrics_(metrics_registry_),

      client_(executor_, upstream::PoolLimits{.idle_ttl = cfg_.upstream_idle_timeout,
                                              .max_response_body = cfg_.max_upstream_body_bytes}),
      registry_(executor_, client_, router_metrics_, cfg_),
      control_agent_(cfg_.transfer_agent
                         ? std::make_unique<kv::ControlAgent>(
                               executor_, client_, router_metrics_,
                               kv::ControlAgentOptions{.transports = cfg_.transfer_agent_transports,
                                                       .net_devices = {}})
                         : nullptr),
      discovery_(executor_, registry_, cfg_, instances::make_resolver(executor_, cfg_)),
      lease_keeper_(executor_, client_, router_metrics_, cfg_),
      kv_forwarder_(cfg_.kv_mode == config::KvMode::Lmcache && !cfg_.replica_id.empty()
                        ? std::make_unique<kv::KvReadyForwarder>(
                              cfg_.replica_id, cfg_.kv_ready_forward_hwm, router_metrics_)
                        : nullptr),
      kv_ready_(cfg_.kv_mode == config::KvMode::Lmcache
                    ? std::make_unique<kv::KvReadyListener>(
                          executor_,
                          kv::KvReadyOptions{
                              .bind = cfg_.kv_ready_bind,
                              .ttl = cfg_.kv_ready_ttl,
                              .max_pending = cfg_.kv_ready_max_pending,
                              .replica_id = cfg_.replica_id,
                              .forwarder = kv_forwarder_.get(),
                              .guard = {cfg_.kv_ready_allow, cfg_.kv_ready_curve_secret_key_file,
                                        cfg_.kv_ready_curve_clients_file}},
                          router_metrics_)
                    : nullptr) {
    for (std::size_t i = 0; i < cfg_.prefill.size(); ++i) {
        instances::InstanceKv kv;
        if (i < cfg_.kv_ready_expected.size()) {
            kv.kv_ready_expected = cfg_.kv_ready_expected[i];
        }
        if (cfg_.kv_mode == config::KvMode::Push) {
            kv.push = config::push_coords_of(cfg_, i);
        }
        registry_.add_configured(instances::Role::Prefill, cfg_.prefill[i], std::move(kv));
    }
    for (std::size_t i = 0; i < cfg_.decode.size(); ++i) {
        instances::InstanceKv kv;
        if (i < cfg_.lmcache_receivers.size()) {
            kv.lmcache = cfg_.lmcache_receivers[i];
        }
        registry_.add_configured(instances::Role::Decode, cfg_.decode[i], std::move(kv));
    }
    if (kv_forwarder_) {
        kv_forwarder_->set_static(cfg_.peer_routers);
        discovery_.on_peers([this](std::vector<config::InstanceAddress> peers) {
            kv_forwarder_->set_discovered(peers);
        });
    }
    auto& lock_waits = lock_waits_family(metrics_registry_);
    lock_spins_ = &lock_waits.Add({{"how", "spin"}});
    lock_blocks_ = &lock_waits.Add({{"how", "block"}});
    const std::size_t n = std::max<std::size_t>(workers, 1);
    const auto counts = server::make_connection_counts();
    for (std::size_t i = 0; i < n; ++i) {
        auto w = std::make_unique<Worker>(*this, i, i == 0 ? &control_ioc_ : nullptr);
        Worker& wr = *w;
        w->server = std::make_unique<server::HttpServer>(
            w->ex, limits_from(cfg_, n, counts),
            [this, &wr](server::Exchange& ex) { return handle(ex, wr); });
        w->server->on_reject([this](Errc e) { router_metrics_.bad_request(error_info(e).code); });
        workers_.push_back(std::move(w));
    }
    // The health loop's tick also closes the workers' expired or closed pooled connections
    // (CLOSE_WAIT otherwise lingers while no request takes them), each on its own thread.
    registry_.set_idle_sweep_handler([this] {
        for (auto& w : workers_) {
            net::post(w->ex, [c = &w->client] { c->sweep_idle(); });
        }
    });
    // An instance added, or back from down, may be another engine build: ask its lease route.
    registry_.set_instance_back_handler([this](const instances::Instance& inst) {
        if (inst.role == instances::Role::Prefill) {
            lease_keeper_.recheck_route(inst.name);
        }
    });
    // A failed probe ends the stalled legs on the instance wherever they are: on every worker.
    registry_.set_stalled_legs_handler([this](const instances::Instance& inst, Duration quiet) {
        for (auto& w : workers_) {
            net::post(w->ex, [this, c = &w->client, role = inst.role, name = inst.name,
                              ep = inst.endpoint, quiet] {
                instances::fail_stalled_legs(*c, router_metrics_, role, name, ep, quiet);
            });
        }
    });
}

App::~App() {
    join_workers();  // a worker thread still running here would be std::terminate
}

awaitable<bool> App::probe_instances() {
    if (cfg_.model.empty()) {
        co_return true;
    }
    co_return co_await registry_.probe_all_at_startup();
}

bool App::bind_kv_ready(std::string& error) {
    if (!kv_ready_) {
        return true;
    }
    if (!kv_ready_->start(error)) {
        return false;
    }
    PDR_INFO(kLog, "waiting for LMCache KV-ready notifications on " + kv_ready_->endpoint() +
                       " (point LMCache's pd_proxy_host/pd_proxy_port here)");
    if (const kv::KvReadyGuard* g = kv_ready_->guard(); kv_forwarder_ && g && g->curve()) {
        kv_forwarder_->use_curve(g->secret_key_z85(), g->public_key_z85());
    }
    if (kv_forwarder_) {
        PDR_INFO(kLog, "replica id " + cfg_.replica_id + ": KV-ready req_ids end in '@" +
                           cfg_.replica_id + "'; other replicas' notifications are forwarded");
    }
    for (const auto& d : registry_.list(instances::Role::Decode)) {
        if (d->kv.lmcache.empty()) {
            PDR_WARN(kLog, "decode instance " + d->name +
                               " has no LMCache receiver ports and is never chosen in the "
                               "lmcache mode (--lmcache-init-ports/--lmcache-alloc-ports)");
        }
    }
    return true;
}

bool App::start_transfer_agent(std::string& error) {
    if (!control_agent_) {
        return true;
    }
    if (!control_agent_->start(error)) {
        return false;
    }
    lease_keeper_.set_renewer(control_agent_.get());
    return true;
}

unsigned short App::listen() {
    const bool shared = workers_.size() > 1;
    const unsigned short port = workers_.front()->server->listen(cfg_.host, cfg_.port, shared);
    for (std::size_t i = 1; i < workers_.size(); ++i) {
        workers_[i]->server->listen(cfg_.host, port, shared);
    }
    registry_.set_self(router_id_, cfg_.host, port);
    return port;
}

std::string App::self_instance() const {
    for (const instances::Role role : {instances::Role::Prefill, instances::Role::Decode}) {
        for (const auto& inst : registry_.list(role)) {
            const config::InstanceAddress a{inst->endpoint.host, inst->endpoint.port};
            if (registry_.is_self(a)) {
                return "--" + std::string(instances::to_string(role)) + " " + inst->name;
            }
        }
    }
    return {};
}

void App::start() {
    {
        SharedLock lock;
        registry_.start();
        discovery_.start();
        lease_keeper_.start();
    }
    for (auto& w : workers_) {
        w->server->start();
        if (w->own_ioc) {
            w->keep_running.emplace(w->own_ioc->get_executor());
            Worker* wp = w.get();
            w->thread = std::thread([wp] { wp->own_ioc->run(); });
        }
    }
    if (workers_.size() > 1) {
        PDR_INFO(kLog, std::to_string(workers_.size()) + " worker threads");
    }
}

void App::end_grace() {
    for (auto& w : workers_) {
        net::post(w->ex, [s = w->server.get()] { s->end_grace(); });
    }
}

awaitable<void> App::shutdown(Duration grace) {
    shutting_down_ = true;
    // Every worker's server drains on its own thread, all at once.
    using Op = decltype(net::co_spawn(executor_, std::declval<awaitable<void>>(), net::deferred));
    std::vector<Op> drains;
    drains.reserve(workers_.size());
    for (auto& w : workers_) {
        drains.push_back(net::co_spawn(w->ex, w->server->drain(grace), net::deferred));
    }
    auto all = net::experimental::make_parallel_group(std::move(drains));
    co_await all.async_wait(net::experimental::wait_for_all(), use_tuple);
    for (auto& w : workers_) {
        if (w->own_ioc) {
            net::post(w->ex, [c = &w->client] { c->close_idle(); });
        } else {
            w->client.close_idle();
        }
    }
    lease_keeper_.stop();
    if (control_agent_) {
        control_agent_->stop();
    }
    if (kv_ready_) {
        kv_ready_->stop();
    }
    discovery_.stop();
    registry_.stop();
    client_.close_idle();
}

void App::join_workers() {
    for (auto& w : workers_) {
        if (w->thread.joinable()) {
            w->keep_running.reset();
            w->own_ioc->stop();
            w->thread.join();
        }
    }
}

awaitable<void> App::handle(server::Exchange& raw, Worker& w) {
    const Clock::time_point started = Clock::now();
    w.requests.Increment();
    TrackedExchange ex(raw, disagg::request_id_for(raw.request()));
    const RouteMatch route = match_route(raw.request().method(), raw.request().target());
    try {
        co_await dispatch(ex, route, started, w);
        if (!ex.responded() && !ex.client_gone()) {
            co_await server::respond_error(ex, Errc::Internal, "no answer was produced");
        }
    } catch (const boost::system::system_error& e) {
        // The server cancelled us (client gone, or drain grace over).
        if (e.code() != net::error::operation_aborted) {
            PDR_ERROR(kLog, std::string("handler failed: ") + e.what(), ex.request_id());
        }
    }
    const metrics::Route mroute =
        route.kind == RouteMatch::Kind::Found ? metrics_route(route.id) : metrics::Route::Other;
    // 499 (client closed request) when the client left before any answer.
    const unsigned status = ex.status() != 0 ? ex.status() : 499;
    const double seconds = disagg::seconds_since(started);
    router_metrics_.request_done(mroute, static_cast<int>(status), seconds);
    if (log::level() <= log::Level::Debug) {
        std::string line;
        line.append(raw.request().method_string())
            .append(" ")
            .append(route.path)
            .append(" ")
            .append(std::to_string(status))
            .append(" ")
            .append(std::to_string(static_cast<long long>(seconds * 1e6)))
            .append("us client=")
            .append(raw.remote_address())
            .append(ex.client_gone() ? " client_gone" : "");
        log::write(log::Level::Debug, kLog, line, ex.request_id());
    }
}

awaitable<void> App::dispatch(TrackedExchange& ex, const RouteMatch& route,
                              Clock::time_point started, Worker& w) {
    if (route.kind == RouteMatch::Kind::NotFound) {
        router_metrics_.bad_request(error_info(Errc::NotFound).code);
        co_await server::respond_error(ex, Errc::NotFound,
                                       "no route for " + std::string(route.path));
        co_return;
    }
    if (route.kind == RouteMatch::Kind::MethodNotAllowed) {
        router_metrics_.bad_request(error_info(Errc::MethodNotAllowed).code);
        server::Response res{http::status::method_not_allowed, ex.request().version()};
        res.set(http::field::content_type, "application/json");
        res.set(http::field::allow, route.allow);
        res.body() = openai_error_body(Errc::MethodNotAllowed,
                                       "method " + std::string(ex.request().method_string()) +
                                           " not allowed on " + std::string(route.path) + "; use " +
                                           std::string(route.allow));
        co_await ex.respond(std::move(res));
        co_return;
    }
    switch (route.id) {
        case RouteId::Completions:
        case RouteId::ChatCompletions:
            co_await handle_generation(ex, route.id, route.path, started, w);
            break;
        case RouteId::Models:
            co_await handle_models(ex, w);
            break;
        case RouteId::PassThrough:
            co_await handle_pass_through(ex, w);
            break;
        case RouteId::Health:
            co_await handle_health(ex);
            break;
        case RouteId::Status:
            co_await handle_status(ex);
            break;
        case RouteId::Metrics:
            co_await handle_metrics(ex);
            break;
        case RouteId::InstancesAdd:
            co_await handle_admin(ex, AdminAction::Add, registry_, router_metrics_,
                                  cfg_.admin_api_key, cfg_.kv_mode);
            break;
        case RouteId::InstancesRemove:
            co_await handle_admin(ex, AdminAction::Remove, registry_, router_metrics_,
                                  cfg_.admin_api_key, cfg_.kv_mode);
            break;
        case RouteId::InstancesList:
            co_await handle_admin(ex, AdminAction::List, registry_, router_metrics_,
                                  cfg_.admin_api_key, cfg_.kv_mode, &lease_keeper_);
            break;
        case RouteId::LeaseRefresh:
            co_await handle_lease_refresh(ex);
            break;
    }
}

}  // namespace pdr::api
