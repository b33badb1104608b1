#pragma once
// pdsim's observable state: counters, recent protocol violations, the request log, and their
// renderings (GET /debug/state, GET /debug/requests, GET /metrics).
#include "sim/kv_store.hpp"

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdint>
#include <deque>
#include <string>
#include <string_view>

namespace pdr::sim {

inline constexpr std::size_t kMaxViolations = 32;
inline constexpr std::size_t kMaxLoggedRequests = 256;
inline constexpr std::size_t kKvCapacityBlocks = 65536;  // denominator of kv_cache_usage_perc

struct Counters {
    std::uint64_t requests = 0;          // completion/chat requests received
    std::uint64_t serving_requests = 0;  // /tokenize, /version, embeddings, score, rerank...
    std::uint64_t completed = 0;
    std::uint64_t protocol_violations = 0;
    std::uint64_t lease_refreshes = 0;  // ids refreshed
    std::uint64_t lease_refresh_calls = 0;
    std::uint64_t lease_refresh_unknown = 0;
    std::uint64_t kv_reads = 0;
    std::uint64_t kv_read_failures = 0;
    std::uint64_t local_prefills = 0;
    std::uint64_t client_disconnects = 0;
    std::uint64_t faults_applied = 0;
    std::uint64_t probes = 0;           // GET /health and GET /v1/models received
    std::uint64_t probes_with_key = 0;  // those with an Authorization header
    std::uint64_t prompt_tokens = 0;
    std::uint64_t generation_tokens = 0;
    std::uint64_t in_flight = 0;
    std::uint64_t decode_blocks_in_use = 0;  // decode role: blocks of running requests
    // LMCache mode, prefill (the decode's side is counted by its KvReceiver and inbox).
    std::uint64_t lmcache_handovers = 0;            // requests with a disagg_spec
    std::uint64_t lmcache_kv_sent = 0;              // rank copies a decode acknowledged
    std::uint64_t lmcache_kv_skipped = 0;           // rank copies not sent (fault)
    std::uint64_t lmcache_kv_send_failures = 0;     // rank copies that failed
    std::uint64_t lmcache_notifs_sent = 0;          // notifications queued (duplicates included)
    std::uint64_t lmcache_notifs_dropped = 0;       // not sent (fault)
    std::uint64_t lmcache_notif_send_failures = 0;  // the socket's queue was full
    std::uint64_t lmcache_garbage_sent = 0;         // malformed messages sent (fault)
    // KV over the transfer core (--kv-transfer pdx).
    std::uint64_t kv_blocks_verified = 0;      // decode: blocks whose every word was checked
    std::uint64_t kv_bytes_verified = 0;       // decode: their bytes
    std::uint64_t kv_verify_failures = 0;      // decode: KV refused (wrong or stale bytes)
    std::uint64_t kv_pool_refusals = 0;        // requests refused: the pool had too few blocks
    std::uint64_t kv_notes_malformed = 0;      // notes with a bad payload or a mismatched id
    std::uint64_t kv_notes_unknown = 0;        // notes of an unknown kind, request or transfer
    std::uint64_t kv_done_notes = 0;           // prefill: pull-mode Done notes that freed blocks
    std::uint64_t kv_registers = 0;            // prefill: Register notes accepted
    std::uint64_t kv_early_registers = 0;      // prefill: ... that came before the prefill ended
    std::uint64_t kv_push_writes = 0;          // prefill: writes to a decode that ended Ok
    std::uint64_t kv_push_write_failures = 0;  // prefill: writes that ended otherwise
    std::uint64_t kv_aborts = 0;               // prefill: Abort notes obeyed
    std::uint64_t kv_heartbeats = 0;           // prefill: Heartbeat notes received
    std::uint64_t kv_control_copies = 0;       // prefill: terminal notes copied to a control peer
    std::uint64_t kv_push_failed_notes = 0;    // decode: Failed notes that ended a wait
    std::uint64_t kv_wait_timeouts = 0;        // decode: no Done/Failed within the bound
    std::uint64_t kv_fault_holds = 0;          // decode: kv_hold_after_ms holds begun
    std::uint64_t kv_aborts_sent = 0;          // decode: Abort notes sent to a prefill
    // Bytes this engine's KV transfers moved and their wall time, summed over transfers that
    // succeeded: pull, D's reads; push, P's writes; lmcache, P's sends (all ranks at once).
    std::uint64_t kv_transfer_bytes = 0;
    std::uint64_t kv_transfer_us = 0;
};

// Adds one successful KV transfer of `bytes` that started at `started` to kv_transfer_*.
inline void count_transfer(Counters& c, std::uint64_t bytes,
                           std::chrono::steady_clock::time_point started) {
    c.kv_transfer_bytes += bytes;
    c.kv_transfer_us +=
        static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                       std::chrono::steady_clock::now() - started)
                                       .count());
}

struct Identity {
    std::string role;  // "prefill" | "decode"
    std::string engine_id;
    std::string model;
    unsigned short port = 0;
};

class SimState {
public:
    Counters counters;

    void add_violation(std::string message);
    const std::deque<std::string>& violations() const noexcept { return violations_; }

    // Records one completion/chat request: path, lower-case headers, body (JSON or raw string).
    void log_request(std::string_view path, nlohmann::json headers, std::string_view body);
    const std::deque<nlohmann::json>& request_log() const noexcept { return log_; }

    void reset();

private:
    std::deque<std::string> violations_;
    std::deque<nlohmann::json> log_;
};

nlohmann::json state_json(const Identity& id, const SimState& s, const BlockStore& store);
nlohmann::json requests_json(const SimState& s);
// Prometheus text format 0.0.4.
std::string metrics_text(const Identity& id, const SimState& s, const BlockStore& store);

}  // namespace pdr::sim
