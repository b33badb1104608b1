#pragma once
// pdrouter_bench --scaling 1,2,4,...: the router's throughput against its worker threads
// (--threads). pdsim engines (`engines` prefill and as many decode instances, so that they are
// not the first to saturate) behind one pdrouter per row, restarted with each thread count; a
// closed-loop load of `concurrency` requests in flight from `load_threads` generator threads.
// Per row: requests/s, the router's CPU (cores busy = CPU seconds / wall seconds), CPU per
// request, requests/s per router core and, for streams, SSE events/s (max_tokens events per
// answer) and events/s per router core; latency p50/p99.
#include <cstddef>
#include <string>
#include <vector>

namespace pdr::bench {

struct ScalingOptions {
    std::string bin_dir = ".";
    std::vector<int> threads{1, 2, 4};
    std::vector<bool> answers{false, true};  // json, stream
    int engines = 4;
    std::size_t concurrency = 256;
    int load_threads = 4;
    std::size_t requests = 20'000;  // measured per row
    int max_tokens = 16;
    int token_delay_ms = 0;       // the decode's per-token delay
    std::string sim_kv_transfer;  // pdsim --kv-transfer (pdx|http); "": pdsim's default
};

// Prints a Markdown table; returns 0 when every request of every row succeeded, 1 otherwise.
int run_scaling(const ScalingOptions& o);

}  // namespace pdr::bench
