#include "plan.hpp"

#include <algorithm>
#include <string>
#include <utility>

namespace pdx::detail {

Result<Plan> make_plan(const PlanSide& local, const PlanSide& remote,
                       std::span<const BlockId> local_ids, std::span<const BlockId> remote_ids,
                       bool local_is_source, const PlanLimits& limits) {
    Plan plan;
    auto r = make_plan(local, remote, local_ids, remote_ids, local_is_source, limits, plan);
    if (!r) {
        return {r.status(), r.message()};
    }
    return plan;
}

Result<void> make_plan(const PlanSide& local, const PlanSide& remote,
                       std::span<const BlockId> local_ids, std::span<const BlockId> remote_ids,
                       bool local_is_source, const PlanLimits& limits, Plan& plan) {
    plan.segments.clear();
    plan.bytes = 0;
    if (local_ids.empty()) {
        return {Status::Invalid, "empty request: no block ids"};
    }
    if (local_ids.size() != remote_ids.size()) {
        return {Status::Invalid, "mismatched request: " + std::to_string(local_ids.size()) +
                                     " local ids vs " + std::to_string(remote_ids.size()) +
                                     " remote ids"};
    }
    if (local_ids.size() > limits.max_blocks) {
        return {Status::Invalid, "oversize request: " + std::to_string(local_ids.size()) +
                                     " blocks > limit " + std::to_string(limits.max_blocks)};
    }
    if (local.layout.block_bytes != remote.layout.block_bytes) {
        return {Status::Invalid, "block size mismatch: local " +
                                     std::to_string(local.layout.block_bytes) + " vs remote " +
                                     std::to_string(remote.layout.block_bytes)};
    }
    const std::uint64_t bs = local.layout.block_bytes;
    // Strides are normalised (add_layout) or refused (decode_descriptor) before they get here;
    // a stride below the block size would make blocks overlap (0: every block is block 0).
    if (local.layout.stride < bs || remote.layout.stride < bs) {
        return {Status::Invalid,
                "layout stride " +
                    std::to_string(std::min(local.layout.stride, remote.layout.stride)) +
                    " smaller than the block size " + std::to_string(bs)};
    }
    auto addr = [](const PlanSide& s, BlockId id) {
        return s.base + s.layout.offset + std::uint64_t(id) * s.layout.stride;
    };
    // Appends one block pair, merging it into the previous segment when contiguous on both sides.
    auto append = [&](BlockId lid, BlockId rid) {
        Segment s{addr(local, lid), addr(remote, rid), bs};
        if (!plan.segments.empty()) {
            Segment& last = plan.segments.back();
            if (last.local_addr + last.bytes == s.local_addr &&
                last.remote_addr + last.bytes == s.remote_addr) {
                last.bytes += bs;
                return;
            }
        }
        plan.segments.push_back(s);
    };
    auto oversize = [&](std::size_t n, std::uint64_t& total) {
        return __builtin_mul_overflow(bs, std::uint64_t(n), &total) || total > limits.max_bytes;
    };
    auto oversize_error = [&](std::size_t n) -> Result<void> {
        return {Status::Invalid, "oversize request: " + std::to_string(n) + " blocks of " +
                                     std::to_string(bs) + " bytes > limit " +
                                     std::to_string(limits.max_bytes)};
    };
    // Fast path: ids strictly increasing on both sides are sorted by source already and hold no
    // duplicates, so the sort and the duplicate checks below cannot change or refuse them.
    bool increasing = true;
    for (std::size_t i = 0; i < local_ids.size(); ++i) {
        if (local_ids[i] >= local.layout.count || remote_ids[i] >= remote.layout.count) {
            increasing = false;  // the slow path reports which one
            break;
        }
        if (i > 0 && (local_ids[i] <= local_ids[i - 1] || remote_ids[i] <= remote_ids[i - 1])) {
            increasing = false;
            break;
        }
    }
    if (increasing) {
        std::uint64_t total = 0;
        if (oversize(local_ids.size(), total)) {
            return oversize_error(local_ids.size());
        }
        plan.bytes = total;
        for (std::size_t i = 0; i < local_ids.size(); ++i) {
            append(local_ids[i], remote_ids[i]);
        }
        return {};
    }
    // (source, destination) pairs
    std::vector<std::pair<BlockId, BlockId>> pairs;
    pairs.reserve(local_ids.size());
    for (std::size_t i = 0; i < local_ids.size(); ++i) {
        if (local_ids[i] >= local.layout.count) {
            return {Status::Invalid, "out of range: local block " + std::to_string(local_ids[i]) +
                                         " >= " + std::to_string(local.layout.count)};
        }
        if (remote_ids[i] >= remote.layout.count) {
            return {Status::Invalid, "out of range: remote block " + std::to_string(remote_ids[i]) +
                                         " >= " + std::to_string(remote.layout.count)};
        }
        if (local_is_source) {
            pairs.emplace_back(local_ids[i], remote_ids[i]);
        } else {
            pairs.emplace_back(remote_ids[i], local_ids[i]);
        }
    }
    std::sort(pairs.begin(), pairs.end());
    pairs.erase(std::unique(pairs.begin(), pairs.end()), pairs.end());
    {
        std::vector<BlockId> dst;
        dst.reserve(pairs.size());
        for (auto& p : pairs) {
            dst.push_back(p.second);
        }
        std::sort(dst.begin(), dst.end());
        auto dup = std::adjacent_find(dst.begin(), dst.end());
        if (dup != dst.end()) {
            return {Status::Invalid, "destination block " + std::to_string(*dup) +
                                         " named twice with different sources"};
        }
    }
    std::uint64_t total = 0;
    if (oversize(pairs.size(), total)) {
        return oversize_error(pairs.size());
    }
    plan.bytes = total;
    for (auto& [src, dst] : pairs) {
        if (local_is_source) {
            append(src, dst);
        } else {
            append(dst, src);
        }
    }
    return {};
}

}  // namespace pdx::detail
