#include "router/api/app.hpp"

#include "net/common/log.hpp"
#include "net/common/uuid.hpp"
#include "router/api/admin.hpp"
#include "router/kv/control_agent.hpp"
#include "router/kv/kv_ready_forwarder.hpp"
#include "router/kv/kv_ready_listener.hpp"

namespace pdr::api {

namespace {

constexpr std::string_view kLog = "api";

server::Limits limits_from(const config::Config& cfg) {
    server::Limits l;
    l.max_header_bytes = cfg.max_header_bytes;
    l.max_body_bytes = cfg.max_body_bytes;
    l.max_buffered_body_bytes = cfg.max_buffered_body_bytes;
    l.read_timeout = cfg.request_read_timeout;
    l.idle_timeout = cfg.client_idle_timeout;
    l.write_timeout = cfg.client_write_timeout;
    l.max_connections = cfg.max_client_connections;
    l.reserved_probe_connections = cfg.reserved_probe_connections;
    l.max_connections_per_source = cfg.max_connections_per_source;
    // Liveness and scraping keep working with every client slot taken.
    l.is_probe = [](const http::request_header<>& h) {
        const RouteMatch m = match_route(h.method(), h.target());
        return m.kind == RouteMatch::Kind::Found &&
               (m.id == RouteId::Health || m.id == RouteId::Metrics);
    };
    return l;
}

}  // namespace

App::App(net::any_io_executor executor, config::Config cfg)
    : cfg_(std::move(cfg)),
      router_id_(make_uuid_v4()),
      executor_(executor),
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
                          kv::KvReadyOptions{.bind = cfg_.kv_ready_bind,
                                             .ttl = cfg_.kv_ready_ttl,
                                             .max_pending = cfg_.kv_ready_max_pending,
                                             .replica_id = cfg_.replica_id,
                                             .forwarder = kv_forwarder_.get()},
                          router_metrics_)
                    : nullptr),
      deps_{registry_, client_,         lease_keeper_,       router_metrics_,
            cfg_,      kv_ready_.get(), control_agent_.get()} {
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
    server_ = std::make_unique<server::HttpServer>(
        executor_, limits_from(cfg_), [this](server::Exchange& ex) { return handle(ex); });
    server_->on_reject([this](Errc e) { router_metrics_.bad_request(error_info(e).code); });
}

App::~App() = default;

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
    const unsigned short port = server_->listen(cfg_.host, cfg_.port);
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
    server_->start();
    registry_.start();
    discovery_.start();
    lease_keeper_.start();
}

awaitable<void> App::shutdown(Duration grace) {
    shutting_down_ = true;
    co_await server_->drain(grace);
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

awaitable<void> App::handle(server::Exchange& raw) {
    const Clock::time_point started = Clock::now();
    TrackedExchange ex(raw, disagg::request_id_for(raw.request()));
    const RouteMatch route = match_route(raw.request().method(), raw.request().target());
    try {
        co_await dispatch(ex, route, started);
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
                              Clock::time_point started) {
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
            co_await handle_generation(ex, route.id, route.path, started);
            break;
        case RouteId::Models:
            co_await handle_models(ex);
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
                                  cfg_.admin_api_key, cfg_.kv_mode);
            break;
        case RouteId::LeaseRefresh:
            co_await handle_lease_refresh(ex);
            break;
    }
}

}  // namespace pdr::api
