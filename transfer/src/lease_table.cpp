#include "lease_table.hpp"

#include <algorithm>

namespace pdx::detail {

void LeaseTable::lease(std::uint64_t transfer_id, LayoutId layout, RegionId region,
                       std::span<const BlockId> ids, Clock::time_point expires) {
    auto [it, fresh] = leases_.try_emplace(transfer_id);
    Lease& l = it->second;
    if (fresh) {
        l.layout = layout;
        l.region = region;
        ++region_refs_[region];
    }
    for (BlockId id : ids) {
        l.ids.push_back(id);
        ++block_refs_[key(layout, id)];
    }
    l.expires = fresh ? expires : std::max(l.expires, expires);
}

bool LeaseTable::renew(std::uint64_t transfer_id, Clock::time_point expires) {
    auto it = leases_.find(transfer_id);
    if (it == leases_.end()) {
        return false;
    }
    it->second.expires = expires;
    return true;
}

void LeaseTable::drop(const Lease& l) {
    for (BlockId id : l.ids) {
        auto it = block_refs_.find(key(l.layout, id));
        if (it != block_refs_.end() && --it->second == 0) {
            block_refs_.erase(it);
        }
    }
    auto r = region_refs_.find(l.region);
    if (r != region_refs_.end() && --r->second == 0) {
        region_refs_.erase(r);
    }
}

bool LeaseTable::release(std::uint64_t transfer_id) {
    auto it = leases_.find(transfer_id);
    if (it == leases_.end()) {
        return false;
    }
    drop(it->second);
    leases_.erase(it);
    return true;
}

bool LeaseTable::is_leased(LayoutId layout, BlockId id) const {
    return block_refs_.count(key(layout, id)) != 0;
}

std::uint32_t LeaseTable::region_leases(RegionId region) const {
    auto it = region_refs_.find(region);
    return it == region_refs_.end() ? 0 : it->second;
}

std::vector<std::uint64_t> LeaseTable::expire(Clock::time_point now) {
    std::vector<std::uint64_t> out;
    for (auto it = leases_.begin(); it != leases_.end();) {
        if (it->second.expires <= now) {
            out.push_back(it->first);
            drop(it->second);
            it = leases_.erase(it);
        } else {
            ++it;
        }
    }
    std::sort(out.begin(), out.end());
    return out;
}

}  // namespace pdx::detail
