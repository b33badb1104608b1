#pragma once
// Runs pdrouter with a parsed configuration until SIGINT/SIGTERM: worker_threads(cfg) data-path
// threads (the calling thread is worker 0 and runs the control executor); start-up model probe
// (mismatch → exit 2); the `pdrouter listening on HOST:PORT` line on stdout and --port-file; drain
// on signal (--shutdown-grace-ms) → exit 0.
#include "config/config.hpp"

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>

namespace pdr::api {

struct RunHooks {
    // Called on the router thread right after the listening line (e.g. --demo's curl hint).
    std::function<void(const std::string& host, unsigned short port)> on_listening;
};

int run(config::Config cfg, const RunHooks& hooks = {});

// --threads, or with 0 the CPUs this process may run on (its affinity mask), but no more than
// its cgroup CPU limit allows (/sys/fs/cgroup/cpu.max, rounded up); at least 1.
std::size_t worker_threads(const config::Config& cfg);
// The cores a cgroup v2 `cpu.max` line allows ("200000 100000" → 2, "150000 100000" → 2);
// 0 for no limit ("max 100000") or a line it cannot read.
std::size_t quota_cores(std::string_view cpu_max);

// Writes `port` to `path` atomically (temporary file + rename). False (and `error`) on failure.
bool write_port_file(const std::string& path, unsigned short port, std::string& error);

}  // namespace pdr::api
