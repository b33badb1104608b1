#pragma once
// Internal to the pdx C API: the handle behind pdx_agent_t and the status/error helpers shared
// by pdx_c.cpp and pdx_c_events.cpp.
#include <chrono>
#include <cstring>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <new>
#include <string>

#include "pdx/agent.hpp"
#include "pdx/pdx.h"

struct pdx_agent {
    std::unique_ptr<pdx::Agent> agent;
    std::mutex mu;  // guards the two leftover queues below
    std::deque<pdx::ReceivedNotification> notifications;
    std::deque<std::uint64_t> expired;
};

namespace pdx::capi {

extern thread_local std::string t_last_error;

inline pdx_status_t fail(pdx_status_t s, std::string message) {
    t_last_error = std::move(message);
    return s;
}

inline pdx_status_t to_c(pdx::Status s) {
    return static_cast<pdx_status_t>(s);
}

template <class R>
pdx_status_t check(const R& r) {
    if (r.ok()) {
        return PDX_OK;
    }
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

inline void copy_str(char* dst, std::size_t cap, const std::string& s) {
    std::size_t n = std::min(cap - 1, s.size());
    std::memcpy(dst, s.data(), n);
    dst[n] = '\0';
}

inline std::chrono::milliseconds ms(std::uint32_t v) {
    return std::chrono::milliseconds(v);
}

// Reads an enum field written by C code as a plain int: C may store any int in it, and loading
// an out-of-range value through the C++ enum type is undefined.
template <class E>
inline int raw(const E& e) {
    static_assert(sizeof(E) == sizeof(int));
    int v = 0;
    std::memcpy(&v, &e, sizeof v);
    return v;
}

inline bool to_cpp(const pdx_notification_t* n, pdx::Notification& out) {
    if (raw(n->kind) < PDX_NOTIFY_DONE || raw(n->kind) > PDX_NOTIFY_ABORT) {
        return false;
    }
    if (n->payload_bytes > PDX_MAX_NOTIFY_PAYLOAD || (n->payload_bytes && !n->payload)) {
        return false;
    }
    out.kind = static_cast<pdx::NotifyKind>(raw(n->kind));
    out.transfer_id = n->transfer_id;
    out.sequence = n->sequence;
    out.expected = n->expected;
    out.status = static_cast<pdx::Status>(raw(n->status));
    out.payload.assign(static_cast<const char*>(n->payload), n->payload_bytes);
    return true;
}

}  // namespace pdx::capi
