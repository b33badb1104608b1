#pragma once
// Internals of SimServer shared by sim_server.cpp (routing, small endpoints) and
// generation_flow.cpp (completions/chat). Not a public header.
#include "net/server/http_server.hpp"
#include "net/upstream/client.hpp"
#include "sim/faults.hpp"
#include "sim/kv_handle.hpp"
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
    std::int64_t created = 0;  // start time (seconds), for /v1/models
    bool stopping = false;

    // Routing and the small endpoints (sim_server.cpp).
    awaitable<void> dispatch(server::Exchange& x);
    awaitable<void> sweep_loop();

    // Completions and chat (generation_flow.cpp).
    awaitable<void> handle_generation(server::Exchange& x, Api api);

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
