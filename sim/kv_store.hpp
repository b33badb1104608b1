#pragma once
// KV blocks of one engine: a pool of `capacity` block ids (0 .. capacity-1, handed out oldest
// freed first), and the blocks a prefill holds per request id after it answered with a KV handle,
// until a decode reads them, a release arrives, or their lease expires. A decode takes blocks
// from the same pool (take/give) for the KV it receives; those are not "held". Time is passed
// in, so the bookkeeping is testable without waiting. Not thread-safe (pdsim runs it on one
// strand). Counters count requests (handles), not blocks.
#include "net/common/io.hpp"

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <span>
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
    std::uint64_t pool_exhausted = 0;  // hold/take refused: too few free blocks
};

inline constexpr std::size_t kDefaultPoolBlocks = 4096;

class BlockStore {
public:
    BlockStore(std::string engine_id, std::size_t block_bytes,
               std::size_t capacity = kDefaultPoolBlocks);

    void set_engine_id(std::string engine_id) { engine_id_ = std::move(engine_id); }

    // Holds `n` free blocks for `request_id` until `expiry`. Blocks already held under the same
    // id are freed first (counted as freed_by_abort). Empty (and pool_exhausted counted) when
    // fewer than `n` blocks are free.
    std::vector<std::int64_t> hold(const std::string& request_id, int n, Clock::time_point expiry);
    // The blocks `request_id` holds, in order (nullptr when none).
    const std::vector<std::int64_t>* blocks_of(const std::string& request_id) const;

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
    // Frees the blocks of `request_id` because a decode consumed them (freed_by_read).
    bool release_consumed(const std::string& request_id);

    // A decode's blocks for KV it receives: `n` free ids, or nullopt (pool_exhausted counted).
    std::optional<std::vector<std::uint32_t>> take(std::size_t n);
    void give(std::span<const std::uint32_t> ids);
    // Called with every block id that goes back to the pool (held or taken), e.g. to scrub it.
    void set_free_hook(std::function<void(std::uint32_t)> hook) { free_hook_ = std::move(hook); }
    // Moves the expiry of `request_id`. False when nothing is held.
    bool refresh(const std::string& request_id, Clock::time_point expiry);
    // Frees every request whose expiry is <= now (freed_by_expiry); returns how many.
    std::size_t expire(Clock::time_point now);
    std::optional<Clock::time_point> next_expiry() const;

    bool holds(const std::string& request_id) const { return held_.count(request_id) != 0; }
    std::size_t blocks_held() const noexcept { return blocks_held_; }
    std::size_t requests_held() const noexcept { return held_.size(); }
    std::size_t capacity() const noexcept { return capacity_; }
    std::size_t blocks_free() const noexcept { return free_.size(); }
    std::size_t blocks_taken() const noexcept { return capacity_ - free_.size() - blocks_held_; }
    const FreeCounters& counters() const noexcept { return counters_; }

    // Drops every held block and zeroes the counters (debug reset); taken blocks stay taken.
    void reset();

private:
    struct Held {
        std::vector<std::int64_t> block_ids;
        Clock::time_point expiry;
    };
    void erase(std::unordered_map<std::string, Held>::iterator it);
    void put_back(std::uint32_t id);

    std::string engine_id_;
    std::size_t block_bytes_;
    std::size_t capacity_;
    std::deque<std::uint32_t> free_;
    std::function<void(std::uint32_t)> free_hook_;
    std::size_t blocks_held_ = 0;
    std::unordered_map<std::string, Held> held_;
    FreeCounters counters_;
};

}  // namespace pdr::sim
