#pragma once
// Emulated KV blocks held by a prefill engine after it answered with a KV handle. Blocks are
// kept per request id until a decode reads them, a release arrives, or their lease expires.
// Time is passed in, so the bookkeeping is testable without waiting. Not thread-safe (pdsim runs
// it on one strand). Counters count requests (handles), not blocks.
#include "net/common/io.hpp"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace pdr::sim {

// Deterministic content of emulated KV blocks: FNV-1a 64 (16 hex digits) over the bytes of
// `block_ids` in order, each block `block_bytes` long, its content a function of
// (engine_id, block id) only.
std::string block_checksum(std::string_view engine_id, const std::vector<std::int64_t>& block_ids,
                           std::size_t block_bytes);

struct FreeCounters {
    std::uint64_t freed_by_read = 0;
    std::uint64_t freed_by_expiry = 0;
    std::uint64_t freed_by_abort = 0;
};

class BlockStore {
public:
    BlockStore(std::string engine_id, std::size_t block_bytes);

    void set_engine_id(std::string engine_id) { engine_id_ = std::move(engine_id); }

    // Holds `n` new blocks (ids unique in this store) for `request_id` until `expiry`. Blocks
    // already held under the same id are freed first (counted as freed_by_abort).
    std::vector<std::int64_t> hold(const std::string& request_id, int n, Clock::time_point expiry);

    enum class ReadStatus { Ok, NotHeld, BlockMismatch };
    struct ReadResult {
        ReadStatus status = ReadStatus::NotHeld;
        std::size_t blocks = 0;
        std::size_t bytes = 0;
        std::string checksum;
    };
    // Reads the blocks of `request_id` (all of them when `block_ids` is empty; otherwise every
    // id must be held by that request) and frees the request's blocks (freed_by_read).
    ReadResult read(const std::string& request_id, const std::vector<std::int64_t>& block_ids);

    // Frees the blocks of `request_id` (freed_by_abort). False when nothing is held.
    bool release(const std::string& request_id);
    // Moves the expiry of `request_id`. False when nothing is held.
    bool refresh(const std::string& request_id, Clock::time_point expiry);
    // Frees every request whose expiry is <= now (freed_by_expiry); returns how many.
    std::size_t expire(Clock::time_point now);
    std::optional<Clock::time_point> next_expiry() const;

    bool holds(const std::string& request_id) const { return held_.count(request_id) != 0; }
    std::size_t blocks_held() const noexcept { return blocks_held_; }
    std::size_t requests_held() const noexcept { return held_.size(); }
    const FreeCounters& counters() const noexcept { return counters_; }

    // Drops every held block and zeroes the counters (debug reset).
    void reset();

private:
    struct Held {
        std::vector<std::int64_t> block_ids;
        Clock::time_point expiry;
    };
    void erase(std::unordered_map<std::string, Held>::iterator it);

    std::string engine_id_;
    std::size_t block_bytes_;
    std::int64_t next_block_id_ = 1;
    std::size_t blocks_held_ = 0;
    std::unordered_map<std::string, Held> held_;
    FreeCounters counters_;
};

}  // namespace pdr::sim
