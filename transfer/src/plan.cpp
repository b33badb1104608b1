#include "plan.hpp"

#include <algorithm>
#include <string>
#include <utility>

namespace pdx::detail {

Result<Plan> make_plan(const PlanSide& local, const PlanSide& remote,
                       std::span<const BlockId> local_ids, std::span<const BlockId> remote_ids,
                       bool local_is_source, const PlanLimits& limits) {
    if (local_ids.empty())
        return {Status::Invalid, "empty request: no block ids"};
    if (local_ids.size() != remote_ids.size())
        return {Status::Invalid, "mismatched request: " + std::to_string(local_ids.size()) +
                                     " local ids vs " + std::to_string(remote_ids.size()) +
                                     " remote ids"};
    if (local_ids.size() > limits.max_blocks)
        return {Status::Invalid, "oversize request: " + std::to_string(local_ids.size()) +
                                     " blocks > limit " + std::to_string(limits.max_blocks)};
    if (local.layout.block_bytes != remote.layout.block_bytes)
        return {Status::Invalid, "block size mismatch: local " +
                                     std::to_string(local.layout.block_bytes) + " vs remote " +
                                     std::to_string(remote.layout.block_bytes)};
    // (source, destination) pairs
    std::vector<std::pair<BlockId, BlockId>> pairs;
    pairs.reserve(local_ids.size());
    for (std::size_t i = 0; i < local_ids.size(); ++i) {
        if (local_ids[i] >= local.layout.count)
            return {Status::Invalid, "out of range: local block " + std::to_string(local_ids[i]) +
                                         " >= " + std::to_string(local.layout.count)};
        if (remote_ids[i] >= remote.layout.count)
            return {Status::Invalid, "out of range: remote block " + std::to_string(remote_ids[i]) +
                                         " >= " + std::to_string(remote.layout.count)};
        if (local_is_source)
            pairs.emplace_back(local_ids[i], remote_ids[i]);
        else
            pairs.emplace_back(remote_ids[i], local_ids[i]);
    }
    std::sort(pairs.begin(), pairs.end());
    pairs.erase(std::unique(pairs.begin(), pairs.end()), pairs.end());
    {
        std::vector<BlockId> dst;
        dst.reserve(pairs.size());
        for (auto& p : pairs)
            dst.push_back(p.second);
        std::sort(dst.begin(), dst.end());
        auto dup = std::adjacent_find(dst.begin(), dst.end());
        if (dup != dst.end())
            return {Status::Invalid, "destination block " + std::to_string(*dup) +
                                         " named twice with different sources"};
    }
    std::uint64_t bs = local.layout.block_bytes;
    std::uint64_t total = 0;
    if (__builtin_mul_overflow(bs, std::uint64_t(pairs.size()), &total) || total > limits.max_bytes)
        return {Status::Invalid, "oversize request: " + std::to_string(pairs.size()) +
                                     " blocks of " + std::to_string(bs) + " bytes > limit " +
                                     std::to_string(limits.max_bytes)};
    auto addr = [](const PlanSide& s, BlockId id) {
        return s.base + s.layout.offset + std::uint64_t(id) * s.layout.stride;
    };
    Plan plan;
    plan.bytes = total;
    for (auto& [src, dst] : pairs) {
        BlockId lid = local_is_source ? src : dst;
        BlockId rid = local_is_source ? dst : src;
        Segment s{addr(local, lid), addr(remote, rid), bs};
        if (!plan.segments.empty()) {
            Segment& last = plan.segments.back();
            if (last.local_addr + last.bytes == s.local_addr &&
                last.remote_addr + last.bytes == s.remote_addr) {
                last.bytes += bs;
                continue;
            }
        }
        plan.segments.push_back(s);
    }
    return plan;
}

}  // namespace pdx::detail
