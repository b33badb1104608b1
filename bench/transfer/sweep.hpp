#pragma once
// Measurement loops of pdx_transfer_bench: one cell = (op, pattern, block size, blocks per
// transfer), run for a bounded time and count on an initiator agent against one peer.
#include <cstdint>
#include <string>
#include <vector>

#include "pdx/agent.hpp"

namespace pdx::bench {

struct Options {
    std::string tls = "tcp";  // tcp | shm | loopback (single process, loopback backend)
    std::vector<std::uint64_t> sizes{4096, 16384, 65536, 262144, 1u << 20, 4u << 20, 16u << 20};
    std::vector<std::uint32_t> blocks{1, 16, 64, 256, 1024};
    std::vector<std::string> patterns{"contig", "scatter"};
    std::vector<std::string> ops{"write", "read"};
    std::uint64_t region_bytes = 64u << 20;  // per side
    std::uint32_t depth = 4;                 // transfers in flight
    std::uint32_t time_ms = 200;             // per cell
    std::uint32_t min_iters = 3;
    std::uint32_t max_iters = 2000;
    std::uint32_t post_iters = 200;  // post-overhead measurement (1024 scattered 4 KiB ids)
    bool do_post = true;
    bool do_verify = true;
    bool csv = false;
    bool register_memory = false;  // malloc + register_region instead of allocate_region
    // Initiator progress: "thread" (the agent's thread; wait() sleeps on a condition variable),
    // "eventfd" (ProgressMode::EventFd; wait() drives progress and sleeps on event_fd()), or
    // "poll" (ProgressMode::EventFd; the waiting caller busy-polls progress() + poll() the way
    // ucx_perftest busy-polls ucp_worker_progress).
    std::string progress = "thread";
    // Target progress: "thread" (its agent's thread, asleep on the UCX event fd between
    // events) or "poll" (ProgressMode::EventFd, its main thread busy-polls progress(), as the
    // ucx_perftest server does while it waits for the last put of ucp_put_bw). Not loopback.
    std::string target_progress = "thread";
    bool latency_stats = true;        // Config::latency_stats on the initiator (--no-latency-stats)
    std::string error_mode = "auto";  // Config::error_mode on both sides: auto | peer | none
    std::string write_protocol = "auto";  // Config::write_protocol on both sides: auto | rma | am
    std::int64_t inline_kib = -1;         // Config::inline_post_bytes in KiB (-1: the default)
    // --post-tail N: N timed write_blocks calls of --tail-ids scattered ids of the first
    // --sizes block size, --depth in flight (0: skipped); prints their time distribution.
    std::uint32_t post_tail = 0;
    std::uint32_t tail_ids = 256;
    std::uint32_t progress_spin_us = 0;  // Config::progress_spin on both sides
};

// The times of single write_blocks calls (--post-tail), in microseconds.
struct PostTail {
    std::vector<double> us;  // one per call, in call order
    std::string error;
};

struct Cell {
    std::string op;
    std::string pattern;
    std::uint64_t block_bytes = 0;
    std::uint32_t blocks = 0;
    std::uint64_t iters = 0;
    double seconds = 0;
    std::uint32_t descriptors = 0;  // after merging, from TransferResult
    double post_us = 0;             // mean time inside write/read_blocks
    std::string error;              // non-empty: the cell failed
    double gbps() const;
    double us_per_transfer() const;
};

// Local and remote id lists: contiguous (0..n-1 on both sides) or scattered (the pairs, sorted
// by local id, have remote ids of which no two neighbours are consecutive; caller order is a
// fixed shuffle).
void make_ids(const std::string& pattern, std::uint32_t n, std::vector<BlockId>& local,
              std::vector<BlockId>& remote);

class Sweep {
public:
    // layouts[i] is the layout of sizes[i] on both sides (same order in both processes).
    Sweep(Agent& agent, PeerHandle peer, const Options& o, std::vector<LayoutId> layouts);
    bool verify(std::string& error);  // write a pattern, read it back, compare
    Cell run_cell(const std::string& op, const std::string& pattern, std::size_t size_index,
                  std::uint32_t blocks);
    // Mean ns inside write_blocks per block id, 1024 4 KiB ids (contig or scatter); <0 if not
    // measurable.
    double post_ns_per_id(const std::string& pattern, std::string& error);
    // Times each of Options::post_tail write_blocks calls (Options::tail_ids scattered ids of
    // layout 0), keeping Options::depth writes in flight, as an engine posting layer after layer.
    PostTail post_tail();

private:
    Status wait(TransferHandle h);  // per Options::progress
    // A request between this agent's and the peer's regions of layout `size_index`.
    TransferRequest request(std::size_t size_index, const std::vector<BlockId>& local,
                            const std::vector<BlockId>& remote) const;
    Result<TransferHandle> post(bool write, std::size_t size_index,
                                const std::vector<BlockId>& local,
                                const std::vector<BlockId>& remote, double& post_us);
    Agent& agent_;
    PeerHandle peer_;
    const Options& o_;
    std::vector<LayoutId> layouts_;
    bool busy_poll_;  // Options::progress == "poll" (compared once, not per transfer)
    std::uint64_t next_id_ = 1;
};

void print_header(const Options& o);
void print_cell(const Options& o, const Cell& c);

}  // namespace pdx::bench
