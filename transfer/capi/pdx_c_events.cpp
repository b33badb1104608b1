// C API: notifications, leases, progress and stats (see pdx_c.cpp).
#include <algorithm>

#include "transfer/capi/capi_internal.hpp"

using namespace pdx::capi;

namespace pdx::capi {

void to_c(const pdx::ReceivedNotification& r, pdx_received_notification_t& out) {
    out.peer = r.peer;
    out.sender_instance = r.sender_instance;
    copy_str(out.peer_name, sizeof out.peer_name, r.peer_name);
    const auto& n = r.notification;
    out.kind = static_cast<pdx_notify_kind_t>(n.kind);
    out.transfer_id = n.transfer_id;
    out.sequence = n.sequence;
    out.expected = n.expected;
    out.status = to_c(n.status);
    std::size_t len = std::min<std::size_t>(n.payload.size(), PDX_MAX_NOTIFY_PAYLOAD);
    out.payload_bytes = static_cast<std::uint32_t>(len);
    std::memcpy(out.payload, n.payload.data(), len);
}

void to_c(const pdx::LatencyStat& l, pdx_latency_t& out) {
    out.count = l.count;
    out.total_ns = l.total_ns;
    out.max_ns = l.max_ns;
}

}  // namespace pdx::capi

extern "C" {

pdx_status_t pdx_notify(pdx_agent_t* a, uint64_t peer, const pdx_notification_t* n) {
    if (!a || !n) {
        return fail(PDX_INVALID, "null agent or notification");
    }
    return guarded([&] {
        pdx::Notification cpp;
        if (!to_cpp(n, cpp)) {
            return fail(PDX_INVALID, "invalid notification");
        }
        return check(a->agent->notify(peer, cpp));
    });
}

size_t pdx_drain_notifications(pdx_agent_t* a, pdx_received_notification_t* out, size_t max) {
    if (!a || (!out && max)) {
        return 0;
    }
    try {
        std::lock_guard lock(a->mu);
        for (auto& n : a->agent->drain_notifications()) {
            a->notifications.push_back(std::move(n));
        }
        std::size_t k = 0;
        for (; k < max && !a->notifications.empty(); ++k) {
            to_c(a->notifications.front(), out[k]);
            a->notifications.pop_front();
        }
        return k;
    } catch (...) {
        fail(PDX_FAILED, "internal error in pdx_drain_notifications");
        return 0;
    }
}

pdx_status_t pdx_lease(pdx_agent_t* a, uint64_t transfer_id, uint32_t layout, const uint32_t* ids,
                       size_t count, uint32_t ttl_ms) {
    if (!a || (count && !ids)) {
        return fail(PDX_INVALID, "null agent or id array");
    }
    return guarded([&] {
        return check(a->agent->lease(transfer_id, layout, std::span<const pdx::BlockId>(ids, count),
                                     ms(ttl_ms)));
    });
}

pdx_status_t pdx_renew(pdx_agent_t* a, uint64_t transfer_id, uint32_t ttl_ms) {
    if (!a) {
        return fail(PDX_INVALID, "null agent");
    }
    return guarded([&] { return check(a->agent->renew(transfer_id, ms(ttl_ms))); });
}

size_t pdx_renew_many(pdx_agent_t* a, const uint64_t* ids, size_t count, uint32_t ttl_ms) {
    if (!a || (count && !ids)) {
        return 0;
    }
    try {
        return a->agent->renew(std::span<const std::uint64_t>(ids, count), ms(ttl_ms));
    } catch (...) {
        fail(PDX_FAILED, "internal error in pdx_renew_many");
        return 0;
    }
}

pdx_status_t pdx_release(pdx_agent_t* a, uint64_t transfer_id) {
    if (!a) {
        return fail(PDX_INVALID, "null agent");
    }
    return guarded([&] { return check(a->agent->release(transfer_id)); });
}

int pdx_is_leased(pdx_agent_t* a, uint32_t layout, uint32_t id) {
    return a && a->agent->is_leased(layout, id) ? 1 : 0;
}

size_t pdx_expire_leases(pdx_agent_t* a, uint64_t* out, size_t max) {
    if (!a || (!out && max)) {
        return 0;
    }
    try {
        std::lock_guard lock(a->mu);
        for (auto id : a->agent->expire_leases()) {
            a->expired.push_back(id);
        }
        std::size_t k = 0;
        for (; k < max && !a->expired.empty(); ++k) {
            out[k] = a->expired.front();
            a->expired.pop_front();
        }
        return k;
    } catch (...) {
        fail(PDX_FAILED, "internal error in pdx_expire_leases");
        return 0;
    }
}

int pdx_event_fd(pdx_agent_t* a) {
    return a ? a->agent->event_fd() : -1;
}

size_t pdx_progress(pdx_agent_t* a) {
    if (!a) {
        return 0;
    }
    try {
        return a->agent->progress();
    } catch (...) {
        fail(PDX_FAILED, "internal error in pdx_progress");
        return 0;
    }
}

int pdx_arm(pdx_agent_t* a) {
    if (!a) {
        return -1;
    }
    try {
        return a->agent->arm() ? 1 : 0;
    } catch (...) {
        return 0;
    }
}

pdx_status_t pdx_stats(pdx_agent_t* a, pdx_stats_t* out) {
    if (!a || !out) {
        return fail(PDX_INVALID, "null agent or stats pointer");
    }
    return guarded([&] {
        pdx::Stats s = a->agent->stats();
        out->bytes_written = s.bytes_written;
        out->bytes_read = s.bytes_read;
        out->transfers_posted = s.transfers_posted;
        out->transfers_ok = s.transfers_ok;
        out->transfers_failed = s.transfers_failed;
        out->transfers_expired = s.transfers_expired;
        out->transfers_canceled = s.transfers_canceled;
        out->transfers_peer_gone = s.transfers_peer_gone;
        out->transfers_refused = s.transfers_refused;
        out->transfers_in_flight = s.transfers_in_flight;
        out->transfers_settling = s.transfers_settling;
        out->regions_without_shm = s.regions_without_shm;
        out->blocks_requested = s.blocks_requested;
        out->descriptors_posted = s.descriptors_posted;
        out->notifications_sent = s.notifications_sent;
        out->notifications_received = s.notifications_received;
        out->notifications_failed = s.notifications_failed;
        out->leases_active = s.leases_active;
        out->leases_expired = s.leases_expired;
        out->peers = s.peers;
        out->peers_gone = s.peers_gone;
        to_c(s.post, out->post);
        to_c(s.completion, out->completion);
        return PDX_OK;
    });
}

}  // extern "C"
