// Agent: batched transfers (several layout groups as one transfer) and already-expired posts.
#include <algorithm>

#include "agent_impl.hpp"

namespace pdx {

TransferHandle Agent::Impl::expire_at_once(const TransferRequest& req, Direction dir,
                                           const Peer& peer, std::uint64_t bytes,
                                           std::uint32_t descriptors) {
    const TransferHandle h = ++next_xfer_;
    ++stats_.transfers_posted;
    TransferResult res = new_result(h, req, peer.handle, dir, bytes, descriptors, Status::Expired);
    res.message = "deadline passed before posting (kExpiredDeadline)";
    count_terminal(res, 0);
    record_terminal(h, res, req.on_complete);
    return h;
}

Result<TransferHandle> Agent::Impl::post_batch(const TransferRequest& req, Direction dir) {
    std::unique_lock lk(mu_);
    auto refuse = [&](Status s, std::string m) -> Result<TransferHandle> {
        ++stats_.transfers_refused;
        return {s, "batch: " + std::move(m)};
    };
    auto pr = live_peer(req.peer);
    if (!pr) {
        return refuse(pr.status(), pr.message());
    }
    Peer& peer = **pr;
    if (req.notify &&
        (req.notify->payload.size() > kMaxNotifyPayload || !known_kind(req.notify->kind))) {
        return refuse(Status::Invalid, "bad notification (kind or payload size)");
    }
    std::vector<Part> parts;
    std::vector<RegionId> pinned;
    std::vector<detail::Segment> dests;  // destination ranges (dest address in local_addr)
    std::uint64_t bytes = 0, blocks = 0;
    std::uint32_t descriptors = 0;
    for (std::size_t g = 0; g < req.groups.size(); ++g) {
        const TransferGroup& grp = req.groups[g];
        const std::string at = "group " + std::to_string(g) + ": ";
        if (grp.local_layout >= layouts_.size()) {
            return refuse(Status::Invalid,
                          at + "unknown local layout " + std::to_string(grp.local_layout));
        }
        if (grp.remote_layout >= peer.desc.layouts.size()) {
            return refuse(Status::Invalid,
                          at + "unknown remote layout " + std::to_string(grp.remote_layout));
        }
        const Layout& ll = layouts_[grp.local_layout];
        const Layout& rl = peer.desc.layouts[grp.remote_layout];
        const Region& region = regions_[ll.region];
        const auto& rr = peer.desc.regions[rl.region];
        if (!region.live || rr.size == 0) {
            return refuse(Status::Invalid, at + "a layout's region was released");
        }
        auto planned =
            detail::make_plan({ll, reinterpret_cast<std::uint64_t>(region.mem.base)}, {rl, rr.base},
                              grp.local_ids, grp.remote_ids, dir == Direction::Write,
                              {cfg_.max_transfer_bytes, cfg_.max_blocks_per_transfer});
        if (!planned) {
            return refuse(planned.status(), at + planned.message());
        }
        bytes += planned->bytes;
        blocks += grp.local_ids.size();
        if (bytes > cfg_.max_transfer_bytes || blocks > cfg_.max_blocks_per_transfer) {
            return refuse(Status::Invalid,
                          "oversize request: the groups together exceed "
                          "max_transfer_bytes or max_blocks_per_transfer");
        }
        descriptors += static_cast<std::uint32_t>(planned->segments.size());
        for (const auto& s : planned->segments) {
            dests.push_back({dir == Direction::Write ? s.remote_addr : s.local_addr, 0, s.bytes});
        }
        split_large(planned->segments);
        if (std::find(pinned.begin(), pinned.end(), ll.region) == pinned.end()) {
            pinned.push_back(ll.region);
        }
        parts.push_back({ll.region, rl.region, std::move(planned->segments)});
    }
    // Groups are planned one by one: a destination shared by two of them is caught here.
    std::sort(dests.begin(), dests.end(),
              [](const auto& a, const auto& b) { return a.local_addr < b.local_addr; });
    for (std::size_t i = 1; i < dests.size(); ++i) {
        if (dests[i].local_addr < dests[i - 1].local_addr + dests[i - 1].bytes) {
            return refuse(Status::Invalid, "two groups name the same destination bytes");
        }
    }
    if (req.deadline == kExpiredDeadline) {
        return expire_at_once(req, dir, peer, bytes, descriptors);
    }
    const TransferHandle h = ++next_xfer_;
    ++stats_.transfers_posted;
    ++stats_.transfers_in_flight;
    stats_.blocks_requested += blocks;
    stats_.descriptors_posted += descriptors;
    Xfer x;
    x.res = new_result(h, req, peer.handle, dir, bytes, descriptors, Status::InProgress);
    x.posted = cfg_.latency_stats ? latency_clock_.now() : 0;
    x.deadline =
        req.deadline == Clock::time_point{} ? deadline_after(cfg_.default_deadline) : req.deadline;
    x.conn = peer.conn;
    x.region = parts.front().region;
    x.remote_region = parts.front().remote_region;
    x.queued = std::move(parts.front().segments);
    parts.erase(parts.begin());
    x.later = std::move(parts);
    x.pinned = pinned;
    x.notify = req.notify;
    x.on_complete = req.on_complete;
    for (RegionId r : pinned) {
        ++regions_[r].ops;
    }
    peer.in_flight.insert(h);
    xfers_.emplace(h, std::move(x));
    post_queue_.push_back(h);
    const bool wake_up = sleeping_;
    sleeping_ = false;
    lk.unlock();
    if (wake_up) {
        wake();
    }
    return h;
}

}  // namespace pdx
