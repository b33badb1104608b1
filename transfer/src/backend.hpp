#pragma once
// Internal seam between the agent core and a data mover (UCX or in-process loopback). The core
// serialises every call under its own lock; events are reported synchronously from inside
// progress() (or from inside post()/disconnect() for immediate failures).
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "pdx/types.hpp"
#include "plan.hpp"
#include "wire.hpp"

namespace pdx::detail {

class BackendEvents {
public:
    virtual ~BackendEvents() = default;
    // A posted operation finished (writes: data flushed to the target).
    virtual void on_op_complete(std::uint64_t op, Status status, std::string message) = 0;
    virtual void on_message(std::span<const std::byte> message) = 0;
    // The connection reported an error (UCX peer-failure mode, or loopback peer destroyed).
    virtual void on_conn_error(std::uint64_t conn, std::string message) = 0;
};

struct LocalRegion {
    std::byte* base = nullptr;
    std::size_t size = 0;
    std::vector<std::byte> rkey;
    void* handle = nullptr;  // backend's memory handle
    bool owned = false;      // allocated by the backend
};

struct ConnectParams {
    std::span<const std::byte> address;
    const std::vector<RemoteRegion>* regions = nullptr;
    bool peer_error_mode = false;
};

class Backend {
public:
    virtual ~Backend() = default;
    virtual Result<LocalRegion> allocate(std::size_t bytes) = 0;
    virtual Result<LocalRegion> register_memory(void* data, std::size_t bytes) = 0;
    virtual void release(LocalRegion& region) = 0;
    virtual std::vector<std::byte> address() const = 0;

    // Returns a connection token (non-zero). Remote regions may be replaced later.
    virtual Result<std::uint64_t> connect(const ConnectParams& params) = 0;
    virtual Result<void> update_regions(std::uint64_t conn,
                                        const std::vector<RemoteRegion>& regions) = 0;
    // Ends the connection. How depends on whether the peer may still be running:
    // - Close::Abort (its process is known to have ended, or the transport reported the
    //   connection failed; also at shutdown): operations on it are canceled or dropped, the
    //   backend never touches their memory afterwards, and none of them is reported. Returns
    //   true.
    // - Close::Graceful (declared gone by a timeout, removed or replaced: it may only be
    //   stopped): the connection is closed without being torn down under the peer (UCX 1.13
    //   crashed the survivor when a peer it had force-closed resumed), so operations already
    //   posted may still run. Returns false if any may: each is then reported by
    //   on_op_complete when it ends, and its memory stays in use until then.
    enum class Close { Abort, Graceful };
    virtual bool disconnect(std::uint64_t conn, Close how) = 0;

    // Posts one transfer: every segment (local region handle, remote region index), then a
    // flush; on_op_complete(op) once everything is done. With `done_inline`, a backend may set
    // it instead when the whole operation completed successfully inside this call (e.g. an shm
    // put and its flush): no on_op_complete follows then.
    virtual Result<void> post(std::uint64_t conn, Direction dir, const LocalRegion& local,
                              std::uint32_t remote_region, std::span<const Segment> segments,
                              std::uint64_t op, bool* done_inline) = 0;
    virtual Result<void> send(std::uint64_t conn, std::vector<std::byte> message) = 0;

    virtual std::size_t progress() = 0;
    // Reports operations that already completed (e.g. inside post()) without progressing the
    // transport. Returns the number reported.
    virtual std::size_t deliver_completed() { return 0; }
    // True if the transport holds work that only progress() can finish (e.g. unsent messages).
    virtual bool busy() const { return false; }
    // True if writes on the connection go as active messages (WriteProtocol::Am or Auto).
    virtual bool am_writes(std::uint64_t /*conn*/) const { return false; }
    virtual int event_fd() const = 0;  // -1 if none
    // A second descriptor to wait on beside event_fd() (UCX: the message worker's), or -1.
    virtual int message_event_fd() const { return -1; }
    virtual bool arm() = 0;  // false: more work pending
};

struct BackendOptions {
    std::uint64_t instance = 0;
    std::string transports;
    std::string net_devices;
    WriteProtocol write_protocol = WriteProtocol::Auto;
};

std::unique_ptr<Backend> make_loopback_backend(const BackendOptions& options, BackendEvents& ev);
// Null with a message in `error` if UCX is not built in or fails to initialise.
std::unique_ptr<Backend> make_ucx_backend(const BackendOptions& options, BackendEvents& ev,
                                          std::string& error);

}  // namespace pdx::detail
