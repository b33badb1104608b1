#pragma once
// Closed-loop HTTP load for the router benchmark: `concurrency` workers on one io_context, each
// sending the same request back to back over pooled keep-alive connections, bounded by a
// request count and a wall-clock limit.
#include "net/upstream/client.hpp"

#include <cstddef>
#include <string>
#include <vector>

namespace pdr::bench {

struct LoadSpec {
    upstream::Endpoint target;
    std::string path;
    std::string body;
    bool stream = false;
    std::size_t concurrency = 32;
    std::size_t requests = 2000;  // measured requests (after warm-up)
    std::size_t warmup = 200;
    Duration time_limit{60'000};  // hard bound on the measured phase
};

struct LoadResult {
    std::size_t ok = 0;
    std::size_t failed = 0;
    double seconds = 0;              // wall time of the measured phase
    std::vector<double> latency_ms;  // whole exchange, per successful request
    std::vector<double> ttfb_ms;     // first body byte (streams) or whole answer (non-stream)
    std::string first_error;

    double rps() const { return seconds > 0 ? ok / seconds : 0; }
};

double percentile(std::vector<double> v, double p);

// Runs warm-up then the measured phase; blocks the calling thread.
LoadResult run_load(const LoadSpec& spec);

}  // namespace pdr::bench
