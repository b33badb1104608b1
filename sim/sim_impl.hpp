#pragma once
// Internals of SimServer shared by sim_server.cpp (routing, small endpoints) and
// generation_flow.cpp (completions/chat). Not a public header.
#include "net/common/task_group.hpp"
#include "net/server/http_server.hpp"
#include "net/upstream/client.hpp"
#include "sim/faults.hpp"
#include "sim/generation.hpp"
#include "sim/kv_handle.hpp"
#include "sim/kv_ready_notifier.hpp"
#include "sim/kv_receiver.hpp"
#include "sim/openai.hpp"
#include "sim/sim_server.hpp"
#include "sim/state.hpp"

#include <nlohmann/json.hpp>

#include <memory>
#include <optional>
#include <string>

namespace pdr::sim {

struct SimServer::Impl : std::enable_shared_from_this<Impl> {
    Impl(net::any_io_executor executor, SimConfig config);

    net::any_io_executor ex;  // a strand: every member below is used on it only
    SimConfig cfg;
    Identity identity;
    SimState state;
    BlockStore store;
    FaultPlan faults;
    upstream::Client client;
    Timer sweep_timer;
    std::optional<server::HttpServer> server;
    // LMCache mode: a prefill's "KV ready" socket, a decode's KV receivers, and notifications
    // sent later than the answer (fault).
    std::unique_ptr<KvReadyNotifier> notifier;
    std::optional<KvReceiver> receiver;
    TaskGroup lmcache_tasks;
    std::int64_t created = 0;  // start time (seconds), for /v1/models
    bool stopping = false;

    // Routing and the small endpoints (sim_server.cpp).
    awaitable<void> dispatch(server::Exchange& x);
    awaitable<void> sweep_loop();

    // Completions and chat (generation_flow.cpp).
    awaitable<void> handle_generation(server::Exchange& x, Api api);

    // LMCache mode (lmcache_flow.cpp).
    void lmcache_start();  // opens the notifier / the receivers (throws on failure)
    void lmcache_stop();
    // Prefill: moves the prompt's KV to every decode rank of `p.spec` and notifies the router,
    // in the order the fault asks for. Returns an error message (the request then fails).
    awaitable<std::string> lmcache_handover(const LmcacheParams& p, std::vector<TokenId> ids,
                                            LmcacheFault f);
    // Decode: claims every rank's KV for ids[0 .. n-1). Returns the error to answer with.
    std::optional<std::string> lmcache_claim(const std::vector<TokenId>& ids);
    nlohmann::json lmcache_state_json() const;
    void lmcache_reset();

    // Tells the prefill named in `h` to free its blocks (detached; the result only logged).
    void spawn_release(const KvHandle& h);
    awaitable<void> release_blocks(KvHandle h);
};

// Answer helpers shared by both files.
std::string dump_json(const nlohmann::json& j);
awaitable<void> send_json(server::Exchange& x, http::status status, std::string body);
awaitable<void> send_error(server::Exchange& x, http::status status, std::string_view message,
                           std::string_view type, std::string_view param = {});
nlohmann::json headers_json(const server::Request& req);

}  // namespace pdr::sim
