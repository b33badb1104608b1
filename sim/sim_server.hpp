#pragma once
// pdsim: an emulated vLLM engine (prefill or decode role) serving the OpenAI API with
// deterministic text, vLLM NixlConnector-style KV handles (pull mode) or an LMCache-style P/D
// pair (KV pushed P→D, "KV ready" notifications over ZMQ), emulated KV blocks with leases, a
// debug API (state, request log, fault injection) and Prometheus metrics.
// Endpoints and behaviour: docs/pdsim.md.
#include "config/role.hpp"
#include "net/common/io.hpp"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace pdr::sim {

using ::pdr::Role;

enum class KvMode { Pull, Lmcache, Push };
const char* kv_mode_name(KvMode m) noexcept;
// How KV blocks move between pdsims: through the transfer core (pdx, docs/transfer.md) or by
// the emulated HTTP read (/internal/pdsim/kv_read, for builds without UCX).
enum class KvTransfer { Pdx, Http };

// LMCache mode (--kv-mode lmcache; docs/pdsim.md, "LMCache mode").
struct LmcacheConfig {
    // Prefill: the ZMQ endpoint its PUSH socket connects to (the router's PULL socket), and the
    // TP size: one "KV ready" notification per rank and request.
    std::string kv_ready_connect;
    int tp_size = 1;
    // Decode: one KV receiver per TP rank, each on an init and an alloc port (0: any free port;
    // start() fills in the bound ports). Empty: tp_size receivers on free ports.
    std::vector<unsigned short> init_ports;
    std::vector<unsigned short> alloc_ports;
    std::string ports_file;                   // decode: main() writes the bound ports there (JSON)
    std::uint32_t kv_bytes_per_token = 64;    // prefill: KV bytes per prompt token and D rank
    double kv_ttl_seconds = 60.0;             // decode: unclaimed KV is dropped after this long
    std::uint64_t max_kv_bytes = 1ULL << 30;  // decode: bound on unclaimed KV held
};

struct SimConfig {
    Role role = Role::Decode;
    std::string host = "127.0.0.1";
    unsigned short port = 0;
    std::string engine_id;  // default: "pdsim-prefill-<port>" / "pdsim-decode-<port>"
    std::string model = "pdsim-model";
    double kv_lease_seconds = 30.0;  // how long prefill holds blocks without a read or refresh
    // POST /internal/nixl/lease_refresh is served (vLLM with #35764); false: it answers 404, as
    // merged vLLM, whose D renews P's leases with NIXL "HB:" notes (vllm#41383).
    bool lease_route = true;
    // The remote_host of the KV handles it answers (empty: `host`). An engine that was not told
    // its address says "localhost" (vLLM: VLLM_NIXL_SIDE_CHANNEL_HOST unset).
    std::string kv_host;
    // Decode role: its answer (a non-stream body, or a stream's last token chunk) carries
    // kv_transfer_params naming its own blocks and host, as vLLM's D does for multi-turn reuse.
    bool answer_kv_params = false;
    Duration token_delay{0};  // per generated token (streaming and non-streaming)
    // Prefill role: the prompt's compute, waited before anything else a prefill does (in every
    // KV mode, before its KV is held, written or sent), so that benchmarks can give the prefill
    // a cost that push mode overlaps with D's setup.
    Duration prefill_delay{0};
    // Decode role, pull and push modes: D's own setup (scheduling, block allocation,
    // registration) before the KV moves: in push mode before D registers its blocks with P (so
    // it overlaps P's prefill), in pull mode before the read (after P's answer).
    Duration decode_setup_delay{0};
    // An idle kept-alive connection is closed after this long, as vLLM's server (uvicorn,
    // timeout_keep_alive 5 s) does: clients that pool connections must cope with it.
    Duration keep_alive{5000};
    int block_size_tokens = 16;
    std::size_t block_bytes = 4096;  // bytes of KV per block (deterministic content)
    KvMode kv_mode = KvMode::Pull;
    // The KV pool: --kv-blocks blocks of --kv-block-bytes, in one region of the transfer agent.
    KvTransfer kv_transfer = KvTransfer::Http;  // parse_args: pdx when UCX is built in
    std::size_t kv_blocks = 4096;
    std::string kv_transports;        // UCX_TLS of the agent ("" = UCX's choice)
    std::string kv_net_devices;       // UCX_NET_DEVICES of the agent ("" = UCX's choice)
    Duration kv_wait_timeout{30000};  // push mode, decode: bound on waiting for P's write
    LmcacheConfig lmcache;
};

class SimServer {
public:
    SimServer(net::any_io_executor ex, SimConfig cfg);
    ~SimServer();
    SimServer(const SimServer&) = delete;
    SimServer& operator=(const SimServer&) = delete;

    // Binds and serves; returns the bound port (throws std::system_error on bind failure).
    // Afterwards config().port is the bound port and config().engine_id is filled in.
    unsigned short start();
    // Stops accepting, drains in-flight requests quickly (a short grace) and stops timers.
    awaitable<void> stop();
    const SimConfig& config() const;

    struct Impl;

private:
    std::shared_ptr<Impl> impl_;
};

// CLI parsing for main.cpp. Returns 0 and fills the outputs; on a bad flag prints one clear
// error naming the flag and value to stderr and returns 2; for --help prints the usage to
// stdout and returns 1 (main then exits 0).
int parse_args(int argc, char** argv, SimConfig& cfg, std::string& port_file,
               std::string& log_level);
// The usage text printed by --help.
std::string usage_text();
// Writes `port` to `path` atomically (path.tmp, then rename). Throws std::runtime_error.
void write_port_file(const std::string& path, unsigned short port);
// Writes {"init_ports": [...], "alloc_ports": [...]} (a decode's bound LMCache receiver ports)
// to `path` atomically. Throws std::runtime_error.
void write_lmcache_ports_file(const std::string& path, const LmcacheConfig& cfg);
const char* role_name(Role r) noexcept;

}  // namespace pdr::sim
