#include "config/ascii.hpp"
#include "net/common/json_limits.hpp"
#include "net/common/log.hpp"
#include "sim/generation.hpp"
#include "sim/sim_impl.hpp"

#include <array>
#include <chrono>

namespace pdr::sim {

using nlohmann::json;

namespace {

constexpr std::string_view kInvalid = "invalid_request_error";
constexpr std::string_view kOkBody = "{\"ok\":true}";
constexpr Duration kDrainGrace{300};
constexpr Duration kMaxSweepWait{50};

struct Route {
    std::string_view path;
    http::verb method;
    bool serving = false;  // answered by handle_serving (serving_routes.cpp)
};

constexpr std::array kRoutes{
    Route{"/v1/completions", http::verb::post},
    Route{"/v1/chat/completions", http::verb::post},
    Route{"/v1/models", http::verb::get},
    Route{"/health", http::verb::get},
    Route{"/metrics", http::verb::get},
    Route{"/tokenize", http::verb::post},
    Route{"/version", http::verb::get, true},
    Route{"/detokenize", http::verb::post, true},
    Route{"/v1/embeddings", http::verb::post, true},
    Route{"/pooling", http::verb::post, true},
    Route{"/classify", http::verb::post, true},
    Route{"/score", http::verb::post, true},
    Route{"/v1/score", http::verb::post, true},
    Route{"/rerank", http::verb::post, true},
    Route{"/v1/rerank", http::verb::post, true},
    Route{"/v2/rerank", http::verb::post, true},
    Route{"/internal/nixl/lease_refresh", http::verb::post},
    Route{"/internal/pdsim/kv_read", http::verb::post},
    Route{"/internal/pdsim/kv_release", http::verb::post},
    Route{"/internal/pdx/descriptor", http::verb::get},
    Route{"/debug/state", http::verb::get},
    Route{"/debug/requests", http::verb::get},
    Route{"/debug/faults", http::verb::post},
    Route{"/debug/reset", http::verb::post},
};

std::string_view path_of(std::string_view target) {
    auto q = target.find('?');
    return q == std::string_view::npos ? target : target.substr(0, q);
}

json parse_object(std::string_view body) {
    json j = parse_untrusted_json(body);
    return j.is_object() ? j : json();
}

std::int64_t now_seconds() {
    return std::chrono::duration_cast<std::chrono::seconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
}

// The entry point the HttpServer calls; holds the Impl alive for the exchange.
awaitable<void> serve_exchange(std::weak_ptr<SimServer::Impl> weak, server::Exchange& x) {
    auto self = weak.lock();
    if (!self) {
        co_return;
    }
    // Errors as values even after the client went away (the server cancels this coroutine).
    co_await net::this_coro::throw_if_cancelled(false);
    co_await self->dispatch(x);
}

awaitable<void> stop_on_strand(std::shared_ptr<SimServer::Impl> self) {
    self->stopping = true;
    self->sweep_timer.cancel();
    self->lmcache_stop();
    if (self->agent) {
        self->agent->stop();
    }
    if (self->server) {
        co_await self->server->drain(kDrainGrace);
    }
    self->client.close_idle();
}

}  // namespace

const char* role_name(Role r) noexcept {
    return r == Role::Prefill ? "prefill" : "decode";
}

std::string dump_json(const json& j) {
    return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

awaitable<void> send_json(server::Exchange& x, http::status status, std::string body) {
    server::Response res{status, x.request().version()};
    res.set(http::field::content_type, "application/json");
    res.body() = std::move(body);
    co_await x.respond(std::move(res));
}

awaitable<void> send_error(server::Exchange& x, http::status status, std::string_view message,
                           std::string_view type, std::string_view param) {
    std::string body = error_body(message, type, static_cast<int>(status), param);
    co_await send_json(x, status, std::move(body));
}

json headers_json(const server::Request& req) {
    json h = json::object();
    for (const auto& field : req) {
        std::string name = ascii::lower(field.name_string());
        std::string value(field.value());
        if (auto it = h.find(name); it != h.end()) {
            value = it->get<std::string>() + ", " + value;
        }
        h[name] = std::move(value);
    }
    return h;
}

SimServer::Impl::Impl(net::any_io_executor executor, SimConfig config)
    : ex(std::move(executor)),
      cfg(std::move(config)),
      store(cfg.engine_id, cfg.block_bytes, cfg.kv_blocks),
      // Its own KV reads go to other pdsims, which close idle connections after their
      // keep-alive: reuse a pooled one only for less than that (as pdrouter does).
      client(ex, upstream::PoolLimits{.idle_ttl = std::max(
                                          Duration{1},
                                          std::min(Duration{4000}, cfg.keep_alive * 4 / 5))}),
      sweep_timer(ex),
      lmcache_tasks(ex) {}

void SimServer::Impl::count_probe(const server::Request& req) {
    ++state.counters.probes;
    if (req.find(http::field::authorization) != req.end()) {
        ++state.counters.probes_with_key;
    }
}

awaitable<void> SimServer::Impl::dispatch(server::Exchange& x) {
    const auto& req = x.request();
    const std::string_view path = path_of(req.target());
    const Route* match = nullptr;
    bool path_known = false;
    for (const auto& r : kRoutes) {
        if (r.path == path) {
            path_known = true;
            if (r.method == req.method()) {
                match = &r;
            }
        }
    }
    if (!path_known) {
        const std::string msg = "no route for " + std::string(path);
        co_await send_error(x, http::status::not_found, msg, kInvalid);
        co_return;
    }
    if (!match) {
        const std::string msg =
            "method " + std::string(req.method_string()) + " not allowed on " + std::string(path);
        co_await send_error(x, http::status::method_not_allowed, msg, kInvalid);
        co_return;
    }
    if (match->serving) {
        co_await handle_serving(x, path);
    } else if (path == "/v1/completions") {
        co_await handle_generation(x, Api::Completions);
    } else if (path == "/v1/chat/completions") {
        co_await handle_generation(x, Api::Chat);
    } else if (path == "/v1/models") {
        count_probe(req);
        json model{{"id", cfg.model},
                   {"object", "model"},
                   {"created", created},
                   {"owned_by", "pdsim"},
                   {"root", cfg.model},
                   {"parent", nullptr},
                   {"max_model_len", kMaxModelLen}};
        std::string body = dump_json(json{{"object", "list"}, {"data", json::array({model})}});
        co_await send_json(x, http::status::ok, std::move(body));
    } else if (path == "/health") {
        count_probe(req);
        co_await send_json(x, http::status::ok, std::string());
    } else if (path == "/metrics") {
        server::Response res{http::status::ok, req.version()};
        res.set(http::field::content_type, "text/plain; version=0.0.4; charset=utf-8");
        res.body() = metrics_text(identity, state, store);
        co_await x.respond(std::move(res));
    } else if (path == "/tokenize") {
        ++state.counters.serving_requests;
        json b = parse_object(req.body());
        std::string prompt;
        std::string error;
        if (b.is_object() && b.contains("prompt") && b["prompt"].is_string()) {
            prompt = b["prompt"].get<std::string>();
        } else if (b.is_object() && b.contains("messages")) {
            if (!chat_prompt(b["messages"], prompt, error)) {
                co_await send_error(x, http::status::bad_request, error, kInvalid, "messages");
                co_return;
            }
        } else {
            co_await send_error(x, http::status::bad_request,
                                "body must be an object with 'prompt' (string) or 'messages'",
                                kInvalid);
            co_return;
        }
        auto tokens = tokenize(prompt);
        const auto count = tokens.size();
        std::string body = dump_json(
            json{{"tokens", std::move(tokens)}, {"count", count}, {"max_model_len", kMaxModelLen}});
        co_await send_json(x, http::status::ok, std::move(body));
    } else if (path == "/internal/nixl/lease_refresh" && !cfg.lease_route) {
        ++state.counters.lease_refresh_calls;
        co_await send_error(x, http::status::not_found, "no route for " + std::string(path),
                            kInvalid);
    } else if (path == "/internal/nixl/lease_refresh") {
        json b = parse_object(req.body());
        if (!b.is_object() || !b.contains("request_ids") || !b["request_ids"].is_array()) {
            co_await send_error(x, http::status::bad_request,
                                "body must be {\"request_ids\": [...]}", kInvalid, "request_ids");
            co_return;
        }
        ++state.counters.lease_refresh_calls;
        const auto expiry = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                               std::chrono::duration<double>(cfg.kv_lease_seconds));
        std::uint64_t refreshed = 0;
        std::uint64_t unknown = 0;
        for (const auto& id : b["request_ids"]) {
            if (id.is_string() && store.refresh(id.get<std::string>(), expiry)) {
                ++refreshed;
            } else {
                ++unknown;
            }
        }
        state.counters.lease_refreshes += refreshed;
        state.counters.lease_refresh_unknown += unknown;
        std::string body = dump_json(json{{"refreshed", refreshed}, {"unknown", unknown}});
        co_await send_json(x, http::status::ok, std::move(body));
    } else if (path == "/internal/pdsim/kv_read") {
        json b = parse_object(req.body());
        std::vector<std::int64_t> ids;
        bool ok = b.is_object() && b.contains("request_id") && b["request_id"].is_string();
        if (ok && b.contains("block_ids")) {
            ok = b["block_ids"].is_array();
            for (const auto& id : ok ? b["block_ids"] : json::array()) {
                if (!id.is_number_integer() && !id.is_number_unsigned()) {
                    ok = false;
                    break;
                }
                ids.push_back(id.get<std::int64_t>());
            }
        }
        if (!ok) {
            co_await send_error(x, http::status::bad_request,
                                "body must be {\"request_id\": str, \"block_ids\": [int...]}",
                                kInvalid);
            co_return;
        }
        const auto rid = b["request_id"].get<std::string>();
        auto r = store.read(rid, ids);
        if (r.status == BlockStore::ReadStatus::NotHeld) {
            const std::string msg = "KV blocks of request " + rid + " are not held";
            co_await send_error(x, http::status::not_found, msg, kInvalid);
        } else if (r.status == BlockStore::ReadStatus::BlockMismatch) {
            const std::string msg = "block_ids do not belong to request " + rid;
            co_await send_error(x, http::status::bad_request, msg, kInvalid, "block_ids");
        } else {
            std::string body =
                dump_json(json{{"blocks", r.blocks}, {"bytes", r.bytes}, {"checksum", r.checksum}});
            co_await send_json(x, http::status::ok, std::move(body));
        }
    } else if (path == "/internal/pdsim/kv_release") {
        json b = parse_object(req.body());
        if (!b.is_object() || !b.contains("request_id") || !b["request_id"].is_string()) {
            co_await send_error(x, http::status::bad_request, "body must be {\"request_id\": str}",
                                kInvalid, "request_id");
            co_return;
        }
        const auto rid = b["request_id"].get<std::string>();
        if (store.release(rid)) {
            std::string body = dump_json(json{{"released", rid}});
            co_await send_json(x, http::status::ok, std::move(body));
        } else {
            const std::string msg = "KV blocks of request " + rid + " are not held";
            co_await send_error(x, http::status::not_found, msg, kInvalid);
        }
    } else if (path == "/internal/pdx/descriptor") {
        if (!agent) {
            co_await send_error(x, http::status::not_found,
                                "this engine moves KV without the transfer core (--kv-transfer "
                                "http)",
                                kInvalid);
            co_return;
        }
        server::Response res{http::status::ok, req.version()};
        res.set(http::field::content_type, "application/octet-stream");
        const auto& d = agent->descriptor();
        res.body().assign(reinterpret_cast<const char*>(d.data()), d.size());
        co_await x.respond(std::move(res));
    } else if (path == "/debug/state") {
        json j = state_json(identity, state, store);
        j.update(lmcache_state_json());
        j.update(kv_state_json());
        std::string body = dump_json(j);
        co_await send_json(x, http::status::ok, std::move(body));
    } else if (path == "/debug/requests") {
        std::string body = dump_json(requests_json(state));
        co_await send_json(x, http::status::ok, std::move(body));
    } else if (path == "/debug/faults") {
        if (auto err = faults.set(req.body())) {
            co_await send_error(x, http::status::bad_request, *err, kInvalid);
        } else {
            co_await send_json(x, http::status::ok, std::string(kOkBody));
        }
    } else if (path == "/debug/reset") {
        faults.clear();
        store.reset();
        state.reset();
        lmcache_reset();
        co_await send_json(x, http::status::ok, std::string(kOkBody));
    }
}

awaitable<void> SimServer::Impl::sweep_loop() {
    auto self = shared_from_this();
    while (!stopping) {
        const auto now = Clock::now();
        if (auto n = store.expire(now); n > 0) {
            PDR_DEBUG("pdsim", "lease expired for " + std::to_string(n) + " request(s)");
        }
        kv_sweep(now);
        if (receiver) {
            if (auto n = receiver->inbox().expire(now); n > 0) {
                PDR_DEBUG("pdsim",
                          "lmcache: " + std::to_string(n) + " unclaimed KV copies expired");
            }
        }
        auto wait = std::chrono::duration_cast<Clock::duration>(kMaxSweepWait);
        if (auto next = store.next_expiry(); next && *next - now < wait) {
            wait = *next - now + std::chrono::milliseconds(1);
        }
        sweep_timer.expires_after(wait);
        co_await sweep_timer.async_wait();
    }
}

void SimServer::Impl::spawn_release(const KvHandle& h) {
    net::co_spawn(ex, release_blocks(h), net::detached);
}

awaitable<void> SimServer::Impl::release_blocks(KvHandle h) {
    auto self = shared_from_this();
    upstream::Request req{http::verb::post, "/internal/pdsim/kv_release", 11};
    req.set(http::field::content_type, "application/json");
    req.body() = dump_json(json{{"request_id", h.request_id}});
    upstream::Timeouts t;
    t.connect = Duration{2000};
    t.response = Duration{5000};
    const upstream::Endpoint ep{h.host, h.port};
    auto res = co_await client.request(ep, std::move(req), t);
    if (!res.ok()) {
        PDR_WARN("pdsim",
                 "kv_release to " + h.host + ":" + std::to_string(h.port) +
                     " failed: " + std::string(upstream::to_string(res.failure)),
                 h.request_id);
    } else {
        PDR_DEBUG("pdsim", "kv_release answered " + std::to_string(res.response.result_int()),
                  h.request_id);
    }
}

SimServer::SimServer(net::any_io_executor ex, SimConfig cfg)
    : impl_(std::make_shared<Impl>(net::make_strand(ex), std::move(cfg))) {}

SimServer::~SimServer() {
    impl_->stopping = true;
    impl_->sweep_timer.cancel();
    impl_->lmcache_stop();
    if (impl_->agent) {
        impl_->agent->stop();
    }
}

unsigned short SimServer::start() {
    Impl& im = *impl_;
    std::weak_ptr<Impl> weak = impl_;
    server::Limits limits;
    limits.idle_timeout = im.cfg.keep_alive;
    limits.name = "engine";
    im.server.emplace(im.ex, limits,
                      [weak](server::Exchange& x) { return serve_exchange(weak, x); });
    const unsigned short port = im.server->listen(im.cfg.host, im.cfg.port);
    im.cfg.port = port;
    if (im.cfg.engine_id.empty()) {
        im.cfg.engine_id =
            std::string("pdsim-") + role_name(im.cfg.role) + "-" + std::to_string(port);
    }
    im.store.set_engine_id(im.cfg.engine_id);
    im.kv_start();  // before the LMCache receivers, which hand pdx frames to the agent
    im.lmcache_start();
    im.identity = Identity{role_name(im.cfg.role), im.cfg.engine_id, im.cfg.model, port};
    im.created = now_seconds();
    im.server->start();
    net::co_spawn(im.ex, im.sweep_loop(), net::detached);
    PDR_INFO("pdsim", std::string(role_name(im.cfg.role)) + " engine " + im.cfg.engine_id + " (" +
                          kv_mode_name(im.cfg.kv_mode) + " mode, KV over " +
                          (im.agent ? "pdx" : "http") + ") listening on port " +
                          std::to_string(port));
    return port;
}

awaitable<void> SimServer::stop() {
    co_await net::co_spawn(impl_->ex, stop_on_strand(impl_), net::use_awaitable);
}

const SimConfig& SimServer::config() const {
    return impl_->cfg;
}

}  // namespace pdr::sim
