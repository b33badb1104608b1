#pragma once
// Runs pdrouter with a parsed configuration until SIGINT/SIGTERM: one io_context thread for the
// whole data path; start-up model probe (mismatch → exit 2); the `pdrouter listening on
// HOST:PORT` line on stdout and --port-file; drain on signal (--shutdown-grace-ms) → exit 0.
#include "config/config.hpp"

#include <functional>
#include <string>

namespace pdr::api {

struct RunHooks {
    // Called on the router thread right after the listening line (e.g. --demo's curl hint).
    std::function<void(const std::string& host, unsigned short port)> on_listening;
};

int run(config::Config cfg, const RunHooks& hooks = {});

// Writes `port` to `path` atomically (temporary file + rename). False (and `error`) on failure.
bool write_port_file(const std::string& path, unsigned short port, std::string& error);

}  // namespace pdr::api
