#pragma once
// Internals of SimServer shared by sim_server.cpp (routing, small endpoints) and
// generation_flow.cpp (completions/chat). Not a public header.
#include "net/common/task_group.hpp"
#include "net/server/http_server.hpp"
#include "net/upstream/client.hpp"
#include "sim/faults.hpp"
#include "sim/generation.hpp"
#include "sim/kv_agent.hpp"
#include "sim/kv_handle.hpp"
#include "sim/kv_ready_notifier.hpp"
#include "sim/kv_receiver.hpp"
#include "sim/kv_sender.hpp"
#include "sim/kv_signal.hpp"
#include "sim/lmcache_wire.hpp"
#include "sim/openai.hpp"
#include "sim/sim_server.hpp"
#include "sim/state.hpp"

#include <nlohmann/json.hpp>

#include <memory>
#include <optional>
#include <string>
#include <unordered_map>

namespace pdr::sim {

// Blocks a decode request took from the pool for the KV it receives; given back when it ends.
struct TakenBlocks {
    BlockStore* store = nullptr;
    std::vector<std::uint32_t> ids;
    TakenBlocks() = default;
    TakenBlocks(const TakenBlocks&) = delete;
    TakenBlocks& operator=(const TakenBlocks&) = delete;
    ~TakenBlocks() {
        if (store) {
            store->give(ids);
        }
    }
};

// How getting a decode request's KV ended: ok, or the status and message to answer with.
struct KvOutcome {
    http::status status = http::status::ok;
    std::string message;
    bool cancelled = false;  // the client went away meanwhile (nothing to answer)
    bool ok() const noexcept { return status == http::status::ok && !cancelled; }
};

// Push mode, prefill side: one transfer, from the first of (its prefill ended holding the
// blocks, D's Register) until the write ends.
struct PushRegistration {
    std::string engine_id;
    std::string host;
    unsigned short port = 0;
    pdx::PeerHandle peer = pdx::kNoPeer;
    pdx::LayoutId layout = 0;
    std::vector<std::uint32_t> blocks;
};
struct PushEntry {
    enum class Stage {
        Registered,  // D registered; the prefill has not ended (kept until `expires`)
        Prefilled,   // P holds the blocks; no Register yet (the blocks' lease bounds it)
        Writing,     // both were there: the write is posted (or delayed by a fault)
        Aborted,     // an Abort came first: a later prefill frees at once, a Register is Failed
    };
    Stage stage = Stage::Registered;
    std::string request_id;
    std::optional<PushRegistration> reg;
    pdx::PeerHandle control = pdx::kNoPeer;  // the router's agent, when the leg named one
    Clock::time_point expires{};             // Registered / Aborted
    int write_delay_ms = 0;                  // fault
    bool failed_to_router_only = false;      // fault: the write fails, D is told nothing
};

// Push mode, decode side: a request waiting for P's Done or Failed.
struct PushOutcome {
    bool done = false;
    std::string error;  // when !done
};
struct PushWait {
    explicit PushWait(net::any_io_executor ex) : signal(std::move(ex)) {}
    std::string transfer_id;
    std::string request_id;
    pdx::PeerHandle peer = pdx::kNoPeer;
    Signal<PushOutcome> signal;
};

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
    // --kv-transfer pdx: the transfer agent, push transfers (prefill) and waits (decode).
    std::unique_ptr<KvAgent> agent;
    std::unordered_map<std::string, PushEntry> pushes;                   // by transfer_id
    std::unordered_map<std::uint64_t, std::shared_ptr<PushWait>> waits;  // by pdx_id(transfer_id)
    // Decode: blocks of a push it gave up on (client gone, timeout), kept out of the pool until
    // P's Failed or Done for it says no byte can land any more (or a bound passes).
    struct Quarantined {
        std::vector<std::uint32_t> ids;
        Clock::time_point until;
    };
    std::unordered_map<std::uint64_t, Quarantined> quarantine;  // by pdx_id(transfer_id)
    std::uint64_t lmcache_transfers = 0;  // decode: names LMCache writes through the agent
    std::int64_t created = 0;             // start time (seconds), for /v1/models
    bool stopping = false;

    // Routing and the small endpoints (sim_server.cpp).
    awaitable<void> dispatch(server::Exchange& x);
    void count_probe(const server::Request& req);  // a /health or /v1/models, with or without a key
    awaitable<void> sweep_loop();

    // Completions and chat (generation_flow.cpp).
    awaitable<void> handle_generation(server::Exchange& x, Api api);
    // /version, /detokenize, embeddings, pooling, classify, score, rerank (serving_routes.cpp).
    awaitable<void> handle_serving(server::Exchange& x, std::string_view path);

    // LMCache mode (lmcache_flow.cpp).
    void lmcache_start();  // opens the notifier / the receivers (throws on failure)
    void lmcache_stop();
    // Prefill: moves the prompt's KV to every decode rank of `p.spec` and notifies the router,
    // in the order the fault asks for. Returns an error message (the request then fails).
    awaitable<std::string> lmcache_handover(const LmcacheParams& p, std::vector<TokenId> ids,
                                            LmcacheFault f);
    // Decode: claims every rank's KV for ids[0 .. n-1). Returns the error to answer with.
    std::optional<std::string> lmcache_claim(const std::vector<TokenId>& ids);
    // With the transfer agent (lmcache_pdx.cpp): P's copy of one rank's KV, written into the
    // blocks D allocates; D's side of one such frame (KvReceiver::PdxFrameFn).
    awaitable<std::string> lmcache_write(KvTarget target, KvShipment kv, Duration timeout);
    awaitable<bool> lmcache_accept(KvLink& link, KvHeader header);
    nlohmann::json lmcache_state_json() const;
    void lmcache_reset();

    // The transfer core (kv_notes.cpp): agent start, notes, peer losses, state.
    void kv_start();  // throws on failure
    void on_note(const pdx::ReceivedNotification& n);
    void on_peer_gone(const pdx::PeerEvent& e);
    nlohmann::json kv_state_json() const;
    void kv_sweep(Clock::time_point now);
    // Sends `kind` with a JSON payload to `peer`; false (logged) when the core refused it.
    bool send_note(pdx::PeerHandle peer, pdx::NotifyKind kind, std::uint64_t id,
                   const nlohmann::json& payload);

    // Prefill (kv_prefill.cpp): holds the leg's blocks and fills them; in push mode registers
    // the transfer and answers push parameters. Returns the answer's kv_transfer_params (null
    // when the pool is exhausted).
    nlohmann::json prefill_hold(const std::string& rid, int prompt_tokens,
                                const nlohmann::json& leg_params, const std::optional<Fault>& f);
    void on_register(const pdx::ReceivedNotification& n, const nlohmann::json& payload);
    awaitable<void> accept_register(std::string transfer_id, PushRegistration reg,
                                    std::string request_id);
    void on_abort(const std::string& request_id, const std::string& transfer_id);
    void try_write(const std::string& transfer_id);
    awaitable<void> push_write(std::string transfer_id);

    // Decode (kv_decode.cpp): gets the KV that `params` names into blocks of `taken`.
    awaitable<KvOutcome> receive_kv(server::Exchange& x, const nlohmann::json& params,
                                    int prompt_tokens, int register_delay_ms, TakenBlocks& taken);
    awaitable<KvOutcome> pull_pdx(const KvHandle& h, TakenBlocks& taken);
    awaitable<KvOutcome> pull_http(const KvHandle& h);
    awaitable<KvOutcome> push_receive(server::Exchange& x, const PushParams& p, int blocks,
                                      int register_delay_ms, int hold_after_ms, TakenBlocks& taken);
    // Checks every word of the received blocks; the outcome names the first bad one.
    KvOutcome verify_blocks(const std::string& request_id, const TakenBlocks& taken,
                            const std::string& from);

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
