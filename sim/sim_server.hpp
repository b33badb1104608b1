#pragma once
// pdsim: an emulated vLLM engine (prefill or decode role) serving the OpenAI API with
// deterministic text, vLLM NixlConnector-style KV handles (pull mode), emulated KV blocks with
// leases, a debug API (state, request log, fault injection) and Prometheus metrics.
// Endpoints and behaviour: docs/pdsim.md.
#include "config/role.hpp"
#include "net/common/io.hpp"

#include <cstddef>
#include <memory>
#include <string>

namespace pdr::sim {

using ::pdr::Role;

struct SimConfig {
    Role role = Role::Decode;
    std::string host = "127.0.0.1";
    unsigned short port = 0;
    std::string engine_id;  // default: "pdsim-prefill-<port>" / "pdsim-decode-<port>"
    std::string model = "pdsim-model";
    double kv_lease_seconds = 30.0;  // how long prefill holds blocks without a read or refresh
    Duration token_delay{0};         // per generated token (streaming and non-streaming)
    // An idle kept-alive connection is closed after this long, as vLLM's server (uvicorn,
    // timeout_keep_alive 5 s) does: clients that pool connections must cope with it.
    Duration keep_alive{5000};
    int block_size_tokens = 16;
    std::size_t block_bytes = 4096;  // bytes of emulated KV per block (deterministic content)
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
const char* role_name(Role r) noexcept;

}  // namespace pdr::sim
