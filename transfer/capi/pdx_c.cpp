// C API over pdx::Agent: opaque handle, status codes equal to pdx::Status, thread-local last
// error. No exception leaves this file.
#include <algorithm>
#include <cstring>
#include <deque>
#include <exception>
#include <mutex>
#include <new>
#include <string>
#include <vector>

#include "pdx/agent.hpp"
#include "pdx/pdx.h"

struct pdx_agent {
    std::unique_ptr<pdx::Agent> agent;
    std::mutex mu;  // guards the two leftover queues below
    std::deque<pdx::ReceivedNotification> notifications;
    std::deque<std::uint64_t> expired;
};

namespace {

static_assert(PDX_OK == static_cast<int>(pdx::Status::Ok));
static_assert(PDX_IN_PROGRESS == static_cast<int>(pdx::Status::InProgress));
static_assert(PDX_PEER_GONE == static_cast<int>(pdx::Status::PeerGone));
static_assert(PDX_EXPIRED == static_cast<int>(pdx::Status::Expired));
static_assert(PDX_CANCELED == static_cast<int>(pdx::Status::Canceled));
static_assert(PDX_FAILED == static_cast<int>(pdx::Status::Failed));
static_assert(PDX_INVALID == static_cast<int>(pdx::Status::Invalid));
static_assert(PDX_NOT_FOUND == static_cast<int>(pdx::Status::NotFound));
static_assert(PDX_BUSY == static_cast<int>(pdx::Status::Busy));
static_assert(PDX_UNSUPPORTED == static_cast<int>(pdx::Status::Unsupported));
static_assert(PDX_MAX_NOTIFY_PAYLOAD == pdx::kMaxNotifyPayload);
static_assert(PDX_NOTIFY_ABORT == static_cast<int>(pdx::NotifyKind::Abort));

thread_local std::string t_last_error;

pdx_status_t fail(pdx_status_t s, std::string message) {
    t_last_error = std::move(message);
    return s;
}

pdx_status_t to_c(pdx::Status s) { return static_cast<pdx_status_t>(s); }

template <class R>
pdx_status_t check(const R& r) {
    if (r.ok()) return PDX_OK;
    return fail(to_c(r.status()), r.message());
}

// Runs f, turning exceptions into PDX_FAILED (or PDX_INVALID for bad_alloc-free misuse).
template <class F>
pdx_status_t guarded(F&& f) noexcept {
    try {
        return f();
    } catch (const std::bad_alloc&) {
        return fail(PDX_FAILED, "out of memory");
    } catch (const std::exception& e) {
        return fail(PDX_FAILED, std::string("internal error: ") + e.what());
    } catch (...) {
        return fail(PDX_FAILED, "internal error");
    }
}

void copy_str(char* dst, std::size_t cap, const std::string& s) {
    std::size_t n = std::min(cap - 1, s.size());
    std::memcpy(dst, s.data(), n);
    dst[n] = '\0';
}

std::chrono::milliseconds ms(std::uint32_t v) { return std::chrono::milliseconds(v); }

bool to_cpp(const pdx_notification_t* n, pdx::Notification& out) {
    if (n->kind < PDX_NOTIFY_DONE || n->kind > PDX_NOTIFY_ABORT) return false;
    if (n->payload_bytes > PDX_MAX_NOTIFY_PAYLOAD || (n->payload_bytes && !n->payload))
        return false;
    out.kind = static_cast<pdx::NotifyKind>(n->kind);
    out.transfer_id = n->transfer_id;
    out.sequence = n->sequence;
    out.expected = n->expected;
    out.status = static_cast<pdx::Status>(n->status);
    out.payload.assign(static_cast<const char*>(n->payload), n->payload_bytes);
    return true;
}

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

pdx_status_t transfer(pdx_agent_t* a, bool write, uint64_t peer, uint32_t local_layout,
                      const uint32_t* local_ids, uint32_t remote_layout,
                      const uint32_t* remote_ids, size_t count, uint64_t transfer_id,
                      uint32_t deadline_ms, const pdx_notification_t* notify, uint64_t* handle) {
    if (!a || !handle) return fail(PDX_INVALID, "null agent or handle pointer");
    if (count && (!local_ids || !remote_ids)) return fail(PDX_INVALID, "null block id array");
    return guarded([&] {
        pdx::TransferRequest req;
        req.peer = peer;
        req.local_layout = local_layout;
        req.local_ids = std::span<const pdx::BlockId>(local_ids, count);
        req.remote_layout = remote_layout;
        req.remote_ids = std::span<const pdx::BlockId>(remote_ids, count);
        req.transfer_id = transfer_id;
        if (deadline_ms) req.deadline = pdx::Clock::now() + ms(deadline_ms);
        if (notify) {
            pdx::Notification n;
            if (!to_cpp(notify, n)) return fail(PDX_INVALID, "invalid notification");
            req.notify = std::move(n);
        }
        auto r = write ? a->agent->write_blocks(req) : a->agent->read_blocks(req);
        if (!r) return check(r);
        *handle = *r;
        return PDX_OK;
    });
}

}  // namespace

extern "C" {

const char* pdx_status_string(pdx_status_t status) {
    if (status < PDX_OK || status > PDX_UNSUPPORTED) return "unknown";
    return pdx::to_string(static_cast<pdx::Status>(status));
}

const char* pdx_last_error(void) { return t_last_error.c_str(); }

int pdx_ucx_available(void) { return pdx::ucx_available() ? 1 : 0; }

void pdx_config_init(pdx_config_t* c) {
    if (!c) return;
    const pdx::Config d;
    std::memset(c, 0, sizeof *c);
    c->backend = static_cast<pdx_backend_t>(d.backend);
    c->progress = static_cast<pdx_progress_t>(d.progress);
    c->error_mode = static_cast<pdx_error_mode_t>(d.error_mode);
    c->heartbeat_interval_ms = static_cast<uint32_t>(d.heartbeat_interval.count());
    c->peer_timeout_ms = static_cast<uint32_t>(d.peer_timeout.count());
    c->default_deadline_ms = static_cast<uint32_t>(d.default_deadline.count());
    c->max_transfer_bytes = d.max_transfer_bytes;
    c->max_blocks_per_transfer = d.max_blocks_per_transfer;
    c->completed_history = d.completed_history;
}

pdx_status_t pdx_agent_create(const pdx_config_t* c, pdx_agent_t** out) {
    if (!c || !out) return fail(PDX_INVALID, "null config or output pointer");
    *out = nullptr;
    if (c->backend != PDX_BACKEND_UCX && c->backend != PDX_BACKEND_LOOPBACK)
        return fail(PDX_INVALID, "unknown backend");
    if (c->progress != PDX_PROGRESS_THREAD && c->progress != PDX_PROGRESS_EVENTFD)
        return fail(PDX_INVALID, "unknown progress mode");
    if (c->error_mode < PDX_ERROR_MODE_AUTO || c->error_mode > PDX_ERROR_MODE_NONE)
        return fail(PDX_INVALID, "unknown error mode");
    return guarded([&] {
        pdx::Config cfg;
        cfg.name = c->name ? c->name : "";
        cfg.backend = static_cast<pdx::BackendKind>(c->backend);
        cfg.progress = static_cast<pdx::ProgressMode>(c->progress);
        cfg.transports = c->transports ? c->transports : "";
        cfg.net_devices = c->net_devices ? c->net_devices : "";
        cfg.error_mode = static_cast<pdx::ErrorMode>(c->error_mode);
        cfg.host_id = c->host_id ? c->host_id : "";
        cfg.heartbeat_interval = ms(c->heartbeat_interval_ms);
        cfg.peer_timeout = ms(c->peer_timeout_ms);
        cfg.default_deadline = ms(c->default_deadline_ms);
        cfg.max_transfer_bytes = c->max_transfer_bytes;
        cfg.max_blocks_per_transfer = c->max_blocks_per_transfer;
        cfg.completed_history = static_cast<std::size_t>(c->completed_history);
        auto r = pdx::Agent::create(cfg);
        if (!r) return check(r);
        auto* a = new pdx_agent;
        a->agent = std::move(*r);
        *out = a;
        return PDX_OK;
    });
}

void pdx_agent_destroy(pdx_agent_t* a) {
    try {
        delete a;
    } catch (...) {
    }
}

uint64_t pdx_agent_instance(const pdx_agent_t* a) { return a ? a->agent->instance() : 0; }

pdx_status_t pdx_allocate_region(pdx_agent_t* a, size_t bytes, uint32_t* region) {
    if (!a || !region) return fail(PDX_INVALID, "null agent or region pointer");
    return guarded([&] {
        auto r = a->agent->allocate_region(bytes);
        if (r) *region = *r;
        return check(r);
    });
}

pdx_status_t pdx_register_region(pdx_agent_t* a, void* data, size_t bytes, uint32_t* region) {
    if (!a || !region) return fail(PDX_INVALID, "null agent or region pointer");
    return guarded([&] {
        auto r = a->agent->register_region(data, bytes);
        if (r) *region = *r;
        return check(r);
    });
}

pdx_status_t pdx_release_region(pdx_agent_t* a, uint32_t region) {
    if (!a) return fail(PDX_INVALID, "null agent");
    return guarded([&] { return check(a->agent->release_region(region)); });
}

void* pdx_region_memory(pdx_agent_t* a, uint32_t region, size_t* bytes) {
    if (bytes) *bytes = 0;
    if (!a) return nullptr;
    auto s = a->agent->region_memory(region);
    if (bytes) *bytes = s.size();
    return s.empty() ? nullptr : s.data();
}

pdx_status_t pdx_add_layout(pdx_agent_t* a, const pdx_layout_t* l, uint32_t* layout_id) {
    if (!a || !l || !layout_id) return fail(PDX_INVALID, "null agent, layout or id pointer");
    return guarded([&] {
        pdx::Layout layout{l->region, l->offset, l->block_bytes, l->stride, l->count};
        auto r = a->agent->add_layout(layout);
        if (r) *layout_id = *r;
        return check(r);
    });
}

void* pdx_block(pdx_agent_t* a, uint32_t layout, uint32_t id, size_t* bytes) {
    if (bytes) *bytes = 0;
    if (!a) return nullptr;
    auto s = a->agent->block(layout, id);
    if (bytes) *bytes = s.size();
    return s.empty() ? nullptr : s.data();
}

pdx_status_t pdx_descriptor(pdx_agent_t* a, void* buf, size_t capacity, size_t* size) {
    if (!a || !size) return fail(PDX_INVALID, "null agent or size pointer");
    return guarded([&] {
        auto blob = a->agent->descriptor();
        *size = blob.size();
        if (!buf) return PDX_OK;
        if (capacity < blob.size())
            return fail(PDX_INVALID, "descriptor buffer too small: need " +
                                         std::to_string(blob.size()) + " bytes");
        std::memcpy(buf, blob.data(), blob.size());
        return PDX_OK;
    });
}

pdx_status_t pdx_add_peer(pdx_agent_t* a, const void* blob, size_t size, uint64_t* peer) {
    if (!a || !peer || (size && !blob)) return fail(PDX_INVALID, "null agent, blob or peer");
    return guarded([&] {
        auto r = a->agent->add_peer(std::span(static_cast<const std::byte*>(blob), size));
        if (r) *peer = *r;
        return check(r);
    });
}

pdx_status_t pdx_remove_peer(pdx_agent_t* a, uint64_t peer) {
    if (!a) return fail(PDX_INVALID, "null agent");
    return guarded([&] { return check(a->agent->remove_peer(peer)); });
}

pdx_status_t pdx_peer_info(pdx_agent_t* a, uint64_t peer, pdx_peer_info_t* info) {
    if (!a || !info) return fail(PDX_INVALID, "null agent or info pointer");
    return guarded([&] {
        auto r = a->agent->peer_info(peer);
        if (!r) return check(r);
        info->handle = r->handle;
        copy_str(info->name, sizeof info->name, r->name);
        info->instance = r->instance;
        info->generation = r->generation;
        info->alive = r->alive;
        info->same_host = r->same_host;
        info->peer_error_mode = r->peer_error_mode;
        info->layouts = r->layouts;
        info->ms_since_heard = r->ms_since_heard;
        return PDX_OK;
    });
}

pdx_status_t pdx_write_blocks(pdx_agent_t* a, uint64_t peer, uint32_t local_layout,
                              const uint32_t* local_ids, uint32_t remote_layout,
                              const uint32_t* remote_ids, size_t count, uint64_t transfer_id,
                              uint32_t deadline_ms, const pdx_notification_t* notify,
                              uint64_t* handle) {
    return transfer(a, true, peer, local_layout, local_ids, remote_layout, remote_ids, count,
                    transfer_id, deadline_ms, notify, handle);
}

pdx_status_t pdx_read_blocks(pdx_agent_t* a, uint64_t peer, uint32_t local_layout,
                             const uint32_t* local_ids, uint32_t remote_layout,
                             const uint32_t* remote_ids, size_t count, uint64_t transfer_id,
                             uint32_t deadline_ms, uint64_t* handle) {
    return transfer(a, false, peer, local_layout, local_ids, remote_layout, remote_ids, count,
                    transfer_id, deadline_ms, nullptr, handle);
}

pdx_status_t pdx_poll(pdx_agent_t* a, uint64_t handle) {
    if (!a) return fail(PDX_INVALID, "null agent");
    return guarded([&] { return to_c(a->agent->poll(handle)); });
}

pdx_status_t pdx_wait(pdx_agent_t* a, uint64_t handle, uint32_t timeout_ms) {
    if (!a) return fail(PDX_INVALID, "null agent");
    return guarded([&] { return to_c(a->agent->wait(handle, ms(timeout_ms))); });
}

pdx_status_t pdx_cancel(pdx_agent_t* a, uint64_t handle) {
    if (!a) return fail(PDX_INVALID, "null agent");
    return guarded([&] { return check(a->agent->cancel(handle)); });
}

pdx_status_t pdx_result(pdx_agent_t* a, uint64_t handle, pdx_transfer_result_t* out) {
    if (!a || !out) return fail(PDX_INVALID, "null agent or result pointer");
    return guarded([&] {
        auto r = a->agent->result(handle);
        if (!r) return check(r);
        out->handle = r->handle;
        out->transfer_id = r->transfer_id;
        out->peer = r->peer;
        out->direction = static_cast<pdx_direction_t>(r->direction);
        out->status = to_c(r->status);
        out->bytes = r->bytes;
        out->descriptors = r->descriptors;
        copy_str(out->message, sizeof out->message, r->message);
        return PDX_OK;
    });
}

pdx_status_t pdx_notify(pdx_agent_t* a, uint64_t peer, const pdx_notification_t* n) {
    if (!a || !n) return fail(PDX_INVALID, "null agent or notification");
    return guarded([&] {
        pdx::Notification cpp;
        if (!to_cpp(n, cpp)) return fail(PDX_INVALID, "invalid notification");
        return check(a->agent->notify(peer, cpp));
    });
}

size_t pdx_drain_notifications(pdx_agent_t* a, pdx_received_notification_t* out, size_t max) {
    if (!a || (!out && max)) return 0;
    try {
        std::lock_guard lock(a->mu);
        for (auto& n : a->agent->drain_notifications()) a->notifications.push_back(std::move(n));
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
    if (!a || (count && !ids)) return fail(PDX_INVALID, "null agent or id array");
    return guarded([&] {
        return check(a->agent->lease(transfer_id, layout,
                                     std::span<const pdx::BlockId>(ids, count), ms(ttl_ms)));
    });
}

pdx_status_t pdx_renew(pdx_agent_t* a, uint64_t transfer_id, uint32_t ttl_ms) {
    if (!a) return fail(PDX_INVALID, "null agent");
    return guarded([&] { return check(a->agent->renew(transfer_id, ms(ttl_ms))); });
}

size_t pdx_renew_many(pdx_agent_t* a, const uint64_t* ids, size_t count, uint32_t ttl_ms) {
    if (!a || (count && !ids)) return 0;
    try {
        return a->agent->renew(std::span<const std::uint64_t>(ids, count), ms(ttl_ms));
    } catch (...) {
        fail(PDX_FAILED, "internal error in pdx_renew_many");
        return 0;
    }
}

pdx_status_t pdx_release(pdx_agent_t* a, uint64_t transfer_id) {
    if (!a) return fail(PDX_INVALID, "null agent");
    return guarded([&] { return check(a->agent->release(transfer_id)); });
}

int pdx_is_leased(pdx_agent_t* a, uint32_t layout, uint32_t id) {
    return a && a->agent->is_leased(layout, id) ? 1 : 0;
}

size_t pdx_expire_leases(pdx_agent_t* a, uint64_t* out, size_t max) {
    if (!a || (!out && max)) return 0;
    try {
        std::lock_guard lock(a->mu);
        for (auto id : a->agent->expire_leases()) a->expired.push_back(id);
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

int pdx_event_fd(pdx_agent_t* a) { return a ? a->agent->event_fd() : -1; }

size_t pdx_progress(pdx_agent_t* a) {
    if (!a) return 0;
    try {
        return a->agent->progress();
    } catch (...) {
        fail(PDX_FAILED, "internal error in pdx_progress");
        return 0;
    }
}

int pdx_arm(pdx_agent_t* a) {
    if (!a) return 1;
    try {
        return a->agent->arm() ? 1 : 0;
    } catch (...) {
        return 0;
    }
}

pdx_status_t pdx_stats(pdx_agent_t* a, pdx_stats_t* out) {
    if (!a || !out) return fail(PDX_INVALID, "null agent or stats pointer");
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
        out->blocks_requested = s.blocks_requested;
        out->descriptors_posted = s.descriptors_posted;
        out->notifications_sent = s.notifications_sent;
        out->notifications_received = s.notifications_received;
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
