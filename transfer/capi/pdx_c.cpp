// C API over pdx::Agent: opaque handle, status codes equal to pdx::Status, thread-local last
// error. No exception leaves this file. Agent, memory, peers and transfers; notifications,
// leases, progress and stats are in pdx_c_events.cpp.
#include <algorithm>
#include <vector>

#include "transfer/capi/capi_internal.hpp"

namespace pdx::capi {

thread_local std::string t_last_error;

}  // namespace pdx::capi

using namespace pdx::capi;

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

void fill_result(const pdx::TransferResult& r, pdx_transfer_result_t* out) {
    out->handle = r.handle;
    out->transfer_id = r.transfer_id;
    out->peer = r.peer;
    out->direction = static_cast<pdx_direction_t>(r.direction);
    out->status = to_c(r.status);
    out->bytes = r.bytes;
    out->descriptors = r.descriptors;
    copy_str(out->message, sizeof out->message, r.message);
}

// poll/wait report states; only an unknown handle is a failing call (pdx_last_error says so).
pdx_status_t unknown_handle_fails(pdx::Status s, uint64_t handle) {
    if (s == pdx::Status::NotFound) {
        return fail(PDX_NOT_FOUND, "unknown transfer handle " + std::to_string(handle) +
                                       " (never issued, or no longer in the completed history)");
    }
    return to_c(s);
}

// The parts of a request every C post shares: transfer id, deadline, notification, callback.
pdx_status_t common_request(pdx::TransferRequest& req, uint64_t transfer_id, uint32_t deadline_ms,
                            const pdx_notification_t* notify, pdx_completion_fn on_complete,
                            void* user_data) {
    req.transfer_id = transfer_id;
    if (deadline_ms == 0) {
        req.deadline = pdx::kExpiredDeadline;
    } else if (deadline_ms != PDX_DEADLINE_DEFAULT) {
        req.deadline = pdx::deadline_after(ms(deadline_ms));
    }
    if (notify) {
        pdx::Notification n;
        if (!to_cpp(notify, n)) {
            return fail(PDX_INVALID, "invalid notification");
        }
        req.notify = std::move(n);
    }
    if (on_complete) {
        // Runs on the progress context (see pdx.h); C code cannot throw, and nothing the
        // conversion does can, so no exception crosses the C frame.
        req.on_complete = [on_complete, user_data](const pdx::TransferResult& r) {
            pdx_transfer_result_t c{};
            fill_result(r, &c);
            on_complete(&c, user_data);
        };
    }
    return PDX_OK;
}

pdx_status_t submit(pdx_agent_t* a, bool write, const pdx::TransferRequest& req, uint64_t* handle) {
    auto r = write ? a->agent->write_blocks(req) : a->agent->read_blocks(req);
    if (!r) {
        return check(r);
    }
    *handle = *r;
    return PDX_OK;
}

pdx_status_t transfer(pdx_agent_t* a, bool write, uint64_t peer, uint32_t local_layout,
                      const uint32_t* local_ids, uint32_t remote_layout, const uint32_t* remote_ids,
                      size_t count, uint64_t transfer_id, uint32_t deadline_ms,
                      const pdx_notification_t* notify, pdx_completion_fn on_complete,
                      void* user_data, uint64_t* handle) {
    if (!a || !handle) {
        return fail(PDX_INVALID, "null agent or handle pointer");
    }
    if (count && (!local_ids || !remote_ids)) {
        return fail(PDX_INVALID, "null block id array");
    }
    return guarded([&] {
        pdx::TransferRequest req;
        req.peer = peer;
        req.local_layout = local_layout;
        req.local_ids = std::span<const pdx::BlockId>(local_ids, count);
        req.remote_layout = remote_layout;
        req.remote_ids = std::span<const pdx::BlockId>(remote_ids, count);
        if (auto s = common_request(req, transfer_id, deadline_ms, notify, on_complete, user_data);
            s != PDX_OK) {
            return s;
        }
        return submit(a, write, req, handle);
    });
}

pdx_status_t batch(pdx_agent_t* a, bool write, uint64_t peer, const pdx_group_t* groups,
                   size_t count, uint64_t transfer_id, uint32_t deadline_ms,
                   const pdx_notification_t* notify, pdx_completion_fn on_complete, void* user_data,
                   uint64_t* handle) {
    if (!a || !handle || (count && !groups)) {
        return fail(PDX_INVALID, "null agent, group array or handle pointer");
    }
    if (count == 0) {
        return fail(PDX_INVALID, "batch: no groups");
    }
    return guarded([&] {
        std::vector<pdx::TransferGroup> gs(count);
        for (std::size_t i = 0; i < count; ++i) {
            const pdx_group_t& g = groups[i];
            if (g.count && (!g.local_ids || !g.remote_ids)) {
                return fail(PDX_INVALID, "batch: group " + std::to_string(i) + ": null id array");
            }
            gs[i] = {g.local_layout, std::span<const pdx::BlockId>(g.local_ids, g.count),
                     g.remote_layout, std::span<const pdx::BlockId>(g.remote_ids, g.count)};
            if (g.count == 0) {
                return fail(PDX_INVALID, "batch: group " + std::to_string(i) + " is empty");
            }
        }
        pdx::TransferRequest req;
        req.peer = peer;
        req.groups = gs;
        if (auto s = common_request(req, transfer_id, deadline_ms, notify, on_complete, user_data);
            s != PDX_OK) {
            return s;
        }
        return submit(a, write, req, handle);
    });
}

}  // namespace

extern "C" {

const char* pdx_status_string(pdx_status_t status) {
    if (status < PDX_OK || status > PDX_UNSUPPORTED) {
        return "unknown";
    }
    return pdx::to_string(static_cast<pdx::Status>(status));
}

const char* pdx_last_error(void) {
    return t_last_error.c_str();
}

int pdx_ucx_available(void) {
    return pdx::ucx_available() ? 1 : 0;
}

void pdx_config_init(pdx_config_t* c) {
    if (!c) {
        return;
    }
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
    c->write_protocol = static_cast<pdx_write_protocol_t>(d.write_protocol);
    c->progress_spin_us = static_cast<uint32_t>(d.progress_spin.count());
}

pdx_status_t pdx_agent_create(const pdx_config_t* c, pdx_agent_t** out) {
    if (!c || !out) {
        return fail(PDX_INVALID, "null config or output pointer");
    }
    *out = nullptr;
    const int backend = raw(c->backend), progress = raw(c->progress), mode = raw(c->error_mode);
    if (backend != PDX_BACKEND_UCX && backend != PDX_BACKEND_LOOPBACK) {
        return fail(PDX_INVALID, "unknown backend");
    }
    if (progress != PDX_PROGRESS_THREAD && progress != PDX_PROGRESS_EVENTFD) {
        return fail(PDX_INVALID, "unknown progress mode");
    }
    if (mode < PDX_ERROR_MODE_AUTO || mode > PDX_ERROR_MODE_NONE) {
        return fail(PDX_INVALID, "unknown error mode");
    }
    const int wp = raw(c->write_protocol);
    if (wp < PDX_WRITE_PROTOCOL_AUTO || wp > PDX_WRITE_PROTOCOL_AM) {
        return fail(PDX_INVALID, "unknown write protocol");
    }
    return guarded([&] {
        pdx::Config cfg;
        cfg.name = c->name ? c->name : "";
        cfg.backend = static_cast<pdx::BackendKind>(backend);
        cfg.progress = static_cast<pdx::ProgressMode>(progress);
        cfg.transports = c->transports ? c->transports : "";
        cfg.net_devices = c->net_devices ? c->net_devices : "";
        cfg.error_mode = static_cast<pdx::ErrorMode>(mode);
        cfg.write_protocol = static_cast<pdx::WriteProtocol>(wp);
        cfg.host_id = c->host_id ? c->host_id : "";
        cfg.heartbeat_interval = ms(c->heartbeat_interval_ms);
        cfg.peer_timeout = ms(c->peer_timeout_ms);
        cfg.default_deadline = ms(c->default_deadline_ms);
        cfg.max_transfer_bytes = c->max_transfer_bytes;
        cfg.max_blocks_per_transfer = c->max_blocks_per_transfer;
        cfg.completed_history = static_cast<std::size_t>(c->completed_history);
        cfg.progress_spin = std::chrono::microseconds(c->progress_spin_us);
        auto r = pdx::Agent::create(cfg);
        if (!r) {
            return check(r);
        }
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

uint64_t pdx_agent_instance(const pdx_agent_t* a) {
    return a ? a->agent->instance() : 0;
}

pdx_status_t pdx_allocate_region(pdx_agent_t* a, size_t bytes, uint32_t* region) {
    return pdx_allocate_region_kind(a, bytes, PDX_MEMORY_HOST, region);
}

pdx_status_t pdx_allocate_region_kind(pdx_agent_t* a, size_t bytes, pdx_memory_kind_t kind,
                                      uint32_t* region) {
    if (!a || !region) {
        return fail(PDX_INVALID, "null agent or region pointer");
    }
    return guarded([&] {
        auto r = a->agent->allocate_region(bytes, static_cast<pdx::MemoryKind>(raw(kind)));
        if (r) {
            *region = *r;
        }
        return check(r);
    });
}

pdx_status_t pdx_register_region(pdx_agent_t* a, void* data, size_t bytes, uint32_t* region) {
    return pdx_register_region_kind(a, data, bytes, PDX_MEMORY_HOST, region);
}

pdx_status_t pdx_register_region_kind(pdx_agent_t* a, void* data, size_t bytes,
                                      pdx_memory_kind_t kind, uint32_t* region) {
    if (!a || !region) {
        return fail(PDX_INVALID, "null agent or region pointer");
    }
    return guarded([&] {
        auto r = a->agent->register_region(data, bytes, static_cast<pdx::MemoryKind>(raw(kind)));
        if (r) {
            *region = *r;
        }
        return check(r);
    });
}

pdx_status_t pdx_release_region(pdx_agent_t* a, uint32_t region) {
    if (!a) {
        return fail(PDX_INVALID, "null agent");
    }
    return guarded([&] { return check(a->agent->release_region(region)); });
}

void* pdx_region_memory(pdx_agent_t* a, uint32_t region, size_t* bytes) {
    if (bytes) {
        *bytes = 0;
    }
    if (!a) {
        return nullptr;
    }
    auto s = a->agent->region_memory(region);
    if (bytes) {
        *bytes = s.size();
    }
    return s.empty() ? nullptr : s.data();
}

pdx_status_t pdx_add_layout(pdx_agent_t* a, const pdx_layout_t* l, uint32_t* layout_id) {
    if (!a || !l || !layout_id) {
        return fail(PDX_INVALID, "null agent, layout or id pointer");
    }
    return guarded([&] {
        pdx::Layout layout{l->region, l->offset, l->block_bytes, l->stride, l->count};
        auto r = a->agent->add_layout(layout);
        if (r) {
            *layout_id = *r;
        }
        return check(r);
    });
}

void* pdx_block(pdx_agent_t* a, uint32_t layout, uint32_t id, size_t* bytes) {
    if (bytes) {
        *bytes = 0;
    }
    if (!a) {
        return nullptr;
    }
    auto s = a->agent->block(layout, id);
    if (bytes) {
        *bytes = s.size();
    }
    return s.empty() ? nullptr : s.data();
}

pdx_status_t pdx_descriptor(pdx_agent_t* a, void* buf, size_t capacity, size_t* size) {
    if (!a || !size) {
        return fail(PDX_INVALID, "null agent or size pointer");
    }
    return guarded([&] {
        auto blob = a->agent->descriptor();
        *size = blob.size();
        if (!buf) {
            return PDX_OK;
        }
        if (capacity < blob.size()) {
            return fail(PDX_INVALID, "descriptor buffer too small: need " +
                                         std::to_string(blob.size()) + " bytes");
        }
        std::memcpy(buf, blob.data(), blob.size());
        return PDX_OK;
    });
}

pdx_status_t pdx_add_peer(pdx_agent_t* a, const void* blob, size_t size, uint64_t* peer) {
    if (!a || !peer || (size && !blob)) {
        return fail(PDX_INVALID, "null agent, blob or peer");
    }
    return guarded([&] {
        auto r = a->agent->add_peer(std::span(static_cast<const std::byte*>(blob), size));
        if (r) {
            *peer = *r;
        }
        return check(r);
    });
}

pdx_status_t pdx_remove_peer(pdx_agent_t* a, uint64_t peer) {
    if (!a) {
        return fail(PDX_INVALID, "null agent");
    }
    return guarded([&] { return check(a->agent->remove_peer(peer)); });
}

pdx_status_t pdx_peer_info(pdx_agent_t* a, uint64_t peer, pdx_peer_info_t* info) {
    if (!a || !info) {
        return fail(PDX_INVALID, "null agent or info pointer");
    }
    return guarded([&] {
        auto r = a->agent->peer_info(peer);
        if (!r) {
            return check(r);
        }
        info->handle = r->handle;
        copy_str(info->name, sizeof info->name, r->name);
        info->instance = r->instance;
        info->generation = r->generation;
        info->alive = r->alive;
        info->same_host = r->same_host;
        info->peer_error_mode = r->peer_error_mode;
        info->layouts = r->layouts;
        info->ms_since_heard = r->ms_since_heard;
        info->am_writes = r->am_writes;
        info->process_watched = r->process_watched;
        return PDX_OK;
    });
}

pdx_status_t pdx_set_peer_callback(pdx_agent_t* a, pdx_peer_event_fn fn, void* user_data) {
    if (!a) {
        return fail(PDX_INVALID, "null agent");
    }
    return guarded([&] {
        if (!fn) {
            a->agent->set_peer_handler(nullptr);
            return PDX_OK;
        }
        a->agent->set_peer_handler([fn, user_data](const pdx::PeerEvent& e) {
            pdx_peer_event_t out{};
            out.peer = e.peer;
            copy_str(out.name, sizeof out.name, e.name);
            out.instance = e.instance;
            out.generation = e.generation;
            out.reason = static_cast<pdx_peer_gone_reason_t>(e.reason);
            copy_str(out.message, sizeof out.message, e.message);
            fn(&out, user_data);
        });
        return PDX_OK;
    });
}

pdx_status_t pdx_write_blocks(pdx_agent_t* a, uint64_t peer, uint32_t local_layout,
                              const uint32_t* local_ids, uint32_t remote_layout,
                              const uint32_t* remote_ids, size_t count, uint64_t transfer_id,
                              uint32_t deadline_ms, const pdx_notification_t* notify,
                              uint64_t* handle) {
    return transfer(a, true, peer, local_layout, local_ids, remote_layout, remote_ids, count,
                    transfer_id, deadline_ms, notify, nullptr, nullptr, handle);
}

pdx_status_t pdx_write_blocks_cb(pdx_agent_t* a, uint64_t peer, uint32_t local_layout,
                                 const uint32_t* local_ids, uint32_t remote_layout,
                                 const uint32_t* remote_ids, size_t count, uint64_t transfer_id,
                                 uint32_t deadline_ms, const pdx_notification_t* notify,
                                 pdx_completion_fn on_complete, void* user_data, uint64_t* handle) {
    return transfer(a, true, peer, local_layout, local_ids, remote_layout, remote_ids, count,
                    transfer_id, deadline_ms, notify, on_complete, user_data, handle);
}

pdx_status_t pdx_read_blocks(pdx_agent_t* a, uint64_t peer, uint32_t local_layout,
                             const uint32_t* local_ids, uint32_t remote_layout,
                             const uint32_t* remote_ids, size_t count, uint64_t transfer_id,
                             uint32_t deadline_ms, uint64_t* handle) {
    return transfer(a, false, peer, local_layout, local_ids, remote_layout, remote_ids, count,
                    transfer_id, deadline_ms, nullptr, nullptr, nullptr, handle);
}

pdx_status_t pdx_read_blocks_cb(pdx_agent_t* a, uint64_t peer, uint32_t local_layout,
                                const uint32_t* local_ids, uint32_t remote_layout,
                                const uint32_t* remote_ids, size_t count, uint64_t transfer_id,
                                uint32_t deadline_ms, pdx_completion_fn on_complete,
                                void* user_data, uint64_t* handle) {
    return transfer(a, false, peer, local_layout, local_ids, remote_layout, remote_ids, count,
                    transfer_id, deadline_ms, nullptr, on_complete, user_data, handle);
}

pdx_status_t pdx_poll(pdx_agent_t* a, uint64_t handle) {
    if (!a) {
        return fail(PDX_INVALID, "null agent");
    }
    return guarded([&] { return unknown_handle_fails(a->agent->poll(handle), handle); });
}

pdx_status_t pdx_wait(pdx_agent_t* a, uint64_t handle, uint32_t timeout_ms) {
    if (!a) {
        return fail(PDX_INVALID, "null agent");
    }
    return guarded(
        [&] { return unknown_handle_fails(a->agent->wait(handle, ms(timeout_ms)), handle); });
}

pdx_status_t pdx_cancel(pdx_agent_t* a, uint64_t handle) {
    if (!a) {
        return fail(PDX_INVALID, "null agent");
    }
    return guarded([&] { return check(a->agent->cancel(handle)); });
}

pdx_status_t pdx_cancel_transfer_id(pdx_agent_t* a, uint64_t transfer_id, size_t* canceled) {
    if (!a) {
        return fail(PDX_INVALID, "null agent");
    }
    return guarded([&] {
        auto r = a->agent->cancel_transfer_id(transfer_id);
        if (canceled) {
            *canceled = r ? *r : 0;
        }
        return check(r);
    });
}

pdx_status_t pdx_write_batch(pdx_agent_t* a, uint64_t peer, const pdx_group_t* groups, size_t count,
                             uint64_t transfer_id, uint32_t deadline_ms,
                             const pdx_notification_t* notify, pdx_completion_fn on_complete,
                             void* user_data, uint64_t* handle) {
    return batch(a, true, peer, groups, count, transfer_id, deadline_ms, notify, on_complete,
                 user_data, handle);
}

pdx_status_t pdx_read_batch(pdx_agent_t* a, uint64_t peer, const pdx_group_t* groups, size_t count,
                            uint64_t transfer_id, uint32_t deadline_ms,
                            pdx_completion_fn on_complete, void* user_data, uint64_t* handle) {
    return batch(a, false, peer, groups, count, transfer_id, deadline_ms, nullptr, on_complete,
                 user_data, handle);
}

pdx_status_t pdx_result(pdx_agent_t* a, uint64_t handle, pdx_transfer_result_t* out) {
    if (!a || !out) {
        return fail(PDX_INVALID, "null agent or result pointer");
    }
    return guarded([&] {
        auto r = a->agent->result(handle);
        if (!r) {
            return check(r);
        }
        fill_result(*r, out);
        return PDX_OK;
    });
}

}  // extern "C"
