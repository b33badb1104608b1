#pragma once
// Turns block-id lists into merged (local address, remote address, bytes) segments.
#include <cstdint>
#include <span>
#include <vector>

#include "pdx/types.hpp"

namespace pdx::detail {

struct Segment {
    std::uint64_t local_addr = 0;
    std::uint64_t remote_addr = 0;
    std::uint64_t bytes = 0;
};

struct Plan {
    std::vector<Segment> segments;
    std::uint64_t bytes = 0;
};

struct PlanSide {
    Layout layout;           // stride already normalised (non-zero)
    std::uint64_t base = 0;  // address of the layout's region
};

struct PlanLimits {
    std::uint64_t max_bytes = 0;
    std::uint32_t max_blocks = 0;
};

// Validates the request (empty, length mismatch, out of range, block size mismatch, oversize,
// the same destination block named twice with different sources) and returns segments sorted
// by source id, with runs contiguous on both sides merged into one segment. Exact duplicate
// pairs are ignored. `local_is_source` is true for writes.
Result<Plan> make_plan(const PlanSide& local, const PlanSide& remote,
                       std::span<const BlockId> local_ids, std::span<const BlockId> remote_ids,
                       bool local_is_source, const PlanLimits& limits);
// The same, into `out` (its segment capacity is reused: no allocation on the hot path when the
// caller keeps one Plan). Ids already strictly increasing on both sides (one id, or contiguous
// runs in order) skip the sort and the duplicate checks, which cannot fail for them.
Result<void> make_plan(const PlanSide& local, const PlanSide& remote,
                       std::span<const BlockId> local_ids, std::span<const BlockId> remote_ids,
                       bool local_is_source, const PlanLimits& limits, Plan& out);

}  // namespace pdx::detail
