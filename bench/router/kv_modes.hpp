#pragma once
// pdrouter_bench --kv-modes: the KV modes side by side in one run. For each transport (pdsim's
// transfer core over UCX shared memory or tcp on lo) and KV size per request, a pdsim pair per
// mode (pull, push, lmcache) moving and verifying real bytes, each behind its own pdrouter; the
// same streamed request (same prompt, prefill delay and decode token delay) goes through each
// router in alternating rounds. Per row: TTFT p50/p99, latency p50, the GB/s of the transfers
// (pdsim's kv_transfer_bytes / kv_transfer_us: pull, D's reads; push, P's writes; lmcache, P's
// sends) and the router's CPU per request.
#include <cstddef>
#include <string>
#include <vector>

namespace pdr::bench {

struct KvModesOptions {
    std::string bin_dir = ".";
    std::vector<std::string> modes{"pull", "push", "lmcache"};
    std::vector<int> sizes_mib{1, 16, 64};              // KV bytes per request, MiB
    std::vector<std::string> transports{"shm", "tcp"};  // lmcache moves its KV over TCP only
    std::size_t requests = 40;                          // measured per row, over all rounds
    std::size_t concurrency = 1;
    int rounds = 2;  // the modes alternate this many times per size (load drift is shared)
    int max_tokens = 8;
    int prefill_delay_ms = 20;  // P's compute (pdsim --prefill-delay-ms), the same in every mode
    int token_delay_ms = 2;     // D's per-token delay, the same in every mode
    // D's setup before the KV moves (pdsim --decode-setup-delay-ms; pull and push): push
    // overlaps it with P's prefill, pull waits it after P's answer. 0: pdsim's own setup only.
    int decode_setup_ms = 10;
    int prompt_tokens = 256;  // one block per token: block bytes = KV size / prompt tokens
};

// Runs the comparison and prints a Markdown table and the push/pull verdicts. Returns 0 when
// every request of every row succeeded, 1 otherwise.
int run_kv_modes(const KvModesOptions& o);

}  // namespace pdr::bench
