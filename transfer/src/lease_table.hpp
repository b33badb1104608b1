#pragma once
// Leases on local blocks keyed by transfer id. Not thread-safe (the agent locks).
#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "pdx/types.hpp"

namespace pdx::detail {

class LeaseTable {
public:
    struct Lease {
        LayoutId layout = 0;
        RegionId region = 0;
        std::vector<BlockId> ids;
        Clock::time_point expires{};
    };

    const Lease* find(std::uint64_t transfer_id) const {
        auto it = leases_.find(transfer_id);
        return it == leases_.end() ? nullptr : &it->second;
    }
    // Adds (or extends) the lease of `transfer_id`; ids are validated and the layout matches.
    void lease(std::uint64_t transfer_id, LayoutId layout, RegionId region,
               std::span<const BlockId> ids, Clock::time_point expires);
    bool renew(std::uint64_t transfer_id, Clock::time_point expires);
    bool release(std::uint64_t transfer_id);
    bool is_leased(LayoutId layout, BlockId id) const;
    std::uint32_t region_leases(RegionId region) const;
    // Full sweep: removes every lease whose expiry is <= now.
    std::vector<std::uint64_t> expire(Clock::time_point now);
    std::size_t size() const { return leases_.size(); }

private:
    static std::uint64_t key(LayoutId l, BlockId b) { return (std::uint64_t(l) << 32) | b; }
    void drop(const Lease& l);

    std::unordered_map<std::uint64_t, Lease> leases_;
    std::unordered_map<std::uint64_t, std::uint32_t> block_refs_;
    std::unordered_map<RegionId, std::uint32_t> region_refs_;
};

}  // namespace pdx::detail
