#pragma once
// pdx::Agent: one endpoint of the KV transfer core. It owns memory regions, block layouts, peers
// (added from their descriptor blobs), transfers (write/read by block ids, with a transfer id,
// a deadline and exactly one terminal state), typed notifications and leases.
//
// Threading: every method is thread-safe. Completion and notification callbacks run on the
// progress context (the agent's thread, or inside progress() in EventFd mode) with no agent lock
// held; they may call back into the agent, and drive progress() of this or another agent
// (nesting across agents, A -> B -> A, does not deadlock; an agent whose callbacks are already
// running on the thread leaves new ones queued for a later progress()). Callbacks of one agent
// never run concurrently.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "pdx/types.hpp"

namespace pdx {

// One group of a batched request: block ids of one local layout paired with block ids of one
// remote layout (e.g. the K or the V layout of one layer).
struct TransferGroup {
    LayoutId local_layout = 0;
    std::span<const BlockId> local_ids;
    LayoutId remote_layout = 0;
    std::span<const BlockId> remote_ids;
};

// One transfer request. Block lists are matched pairwise: local_ids[i] <-> remote_ids[i].
// The core sorts the pairs by source id and merges runs that are contiguous on BOTH sides into
// one operation. An exact duplicate pair is ignored; one destination block named twice with
// different sources is refused (Invalid).
struct TransferRequest {
    PeerHandle peer = kNoPeer;
    LayoutId local_layout = 0;
    std::span<const BlockId> local_ids;
    LayoutId remote_layout = 0;  // a layout id from the peer's descriptor
    std::span<const BlockId> remote_ids;
    // Batched request: when non-empty, these groups (each planned, sorted and merged like the
    // single form above, whose four fields are then ignored) make ONE transfer: one handle,
    // one terminal state, one callback and one Done. A destination byte named by two groups
    // is refused (Invalid). Batches are always posted by the progress context.
    std::span<const TransferGroup> groups;
    std::uint64_t transfer_id = 0;
    // Default (time_point{}): now + Config::default_deadline. kExpiredDeadline: already
    // expired (the transfer is accepted and ends Expired at once; nothing is moved).
    // deadline_after(d) builds one from a duration without overflow. Like cancel(), a deadline ends
    // the transfer, not necessarily its backend operation: see cancel() for when local blocks are
    // safe to reuse.
    Clock::time_point deadline{};
    // Writes only: sent to the peer after the data is flushed to it (typically Done). If the
    // write ends in any other state a Failed notification is sent instead (best effort).
    std::optional<Notification> notify;
    CompletionFn on_complete;  // optional; called once with the terminal state
};

// What a descriptor blob says about its agent, without adding it.
struct DescriptorSummary {
    std::string name;
    std::uint64_t instance = 0;
    std::uint32_t version = 0;
    std::uint64_t compat_hash = 0;
    BackendKind backend = BackendKind::Ucx;
    std::string host_id;
    std::uint32_t regions = 0;
    std::uint32_t layouts = 0;
};

// Parses and validates a blob (magic, version, compatibility hash, bounds).
Result<DescriptorSummary> inspect_descriptor(std::span<const std::byte> blob);
// True when this build has the UCX backend.
bool ucx_available() noexcept;

class Agent {
public:
    // Fails (Unsupported / Failed) if the backend cannot be created.
    static Result<std::unique_ptr<Agent>> create(const Config& config);
    ~Agent();
    Agent(const Agent&) = delete;
    Agent& operator=(const Agent&) = delete;

    const std::string& name() const;
    std::uint64_t instance() const;  // random 64-bit nonce of this agent's life
    const Config& config() const;

    // ---- memory ------------------------------------------------------------------------
    // Memory allocated by the backend (UCX: UCP_MEM_MAP_ALLOCATE, so shm transports work).
    // Only MemoryKind::Host is supported: any other kind is refused with Unsupported.
    Result<RegionId> allocate_region(std::size_t bytes, MemoryKind kind = MemoryKind::Host);
    // Caller memory registered as it is; it must outlive the region.
    Result<RegionId> register_region(void* data, std::size_t bytes,
                                     MemoryKind kind = MemoryKind::Host);
    // Refused with Busy while a lease or an in-flight transfer uses the region.
    Result<void> release_region(RegionId region);
    std::span<std::byte> region_memory(RegionId region) const;  // empty if unknown
    Result<RegionInfo> region_info(RegionId region) const;
    Result<LayoutId> add_layout(const Layout& layout);
    // Local block memory (empty span if the layout or id is out of range).
    std::span<std::byte> block(LayoutId layout, BlockId id) const;

    // ---- peers -------------------------------------------------------------------------
    // Versioned little-endian blob: magic, version, compat hash, name, instance nonce, host id,
    // backend, worker address, packed rkeys, layouts. Take it after regions/layouts are added.
    std::vector<std::byte> descriptor() const;
    // Blobs must come over a trusted channel: the decoder checks the format and bounds, but the
    // worker address and packed rkeys are handed to UCX as they are (it unpacks rkeys without a
    // length check; a corrupt one can crash the process, e.g. over posix shm).
    // Idempotent for the same instance while its handle is alive: returns the same handle
    // (layouts and rkeys refreshed; an unchanged rkey is kept). Once that handle was declared
    // gone or removed, the same instance again (e.g. a peer stopped past peer_timeout that runs
    // again) is connected anew under a new handle; the old one stays gone. A NON-EMPTY name
    // identifies one logical peer across restarts (see Config::name): a new instance under the same
    // name is a new generation, and once it is connected the old handle becomes stale (its
    // transfers end PeerGone, later calls with it get NotFound); if the new one cannot be
    // connected, the old generation stays as it was. An instance a newer generation replaced is
    // refused for good (Invalid: a late copy of an old descriptor). Peers with an empty name are
    // never replaced by another instance.
    Result<PeerHandle> add_peer(std::span<const std::byte> blob);
    // Ends the peer's in-flight transfers with PeerGone; the handle becomes stale.
    Result<void> remove_peer(PeerHandle peer);
    Result<PeerInfo> peer_info(PeerHandle peer) const;
    // Called once for every peer handle that stops being alive (removed, replaced, timed out,
    // its process ended, or its connection failed), on the progress context like completion
    // callbacks, after that peer's transfers got their terminal state. Without a handler the
    // events are dropped (peer_info() still says `alive = false`).
    void set_peer_handler(PeerEventFn handler);
    std::vector<PeerInfo> peers() const;

    // ---- transfers ---------------------------------------------------------------------
    Result<TransferHandle> write_blocks(const TransferRequest& request);
    Result<TransferHandle> read_blocks(const TransferRequest& request);
    // InProgress, a terminal state, or NotFound (unknown or evicted from the history).
    Status poll(TransferHandle handle) const;
    Result<TransferResult> result(TransferHandle handle) const;
    // Ends the transfer with Canceled (if not terminal yet). Canceled and Expired end the
    // transfer, not its backend operation: operations already posted run to completion (only
    // chunks still queued are dropped), so bytes may still land at the target (writes) or in
    // the LOCAL blocks (reads: a read may overwrite them after it reported Canceled/Expired).
    // Reuse a canceled or expired read's local blocks only once release_region() of their
    // region would no longer be refused with Busy for transfers in flight, i.e. every
    // operation on it has settled (or after the peer is removed or gone: the backend then
    // never touches those operations' memory again).
    // A transfer that already ended is refused with Invalid ("already ended: <state>").
    Result<void> cancel(TransferHandle handle);
    // Cancels every transfer in flight with this transfer id (a batch is one); returns how
    // many, or NotFound if none is in flight.
    Result<std::size_t> cancel_transfer_id(std::uint64_t transfer_id);
    // Blocks (driving progress itself in EventFd mode) until terminal or `timeout` passes
    // (milliseconds::max(): until terminal; the deadline still ends the transfer).
    Status wait(TransferHandle handle, std::chrono::milliseconds timeout);

    // ---- notifications -----------------------------------------------------------------
    Result<void> notify(PeerHandle peer, const Notification& notification);
    // With a handler, notifications go to it; without one they queue for drain_notifications().
    void set_notification_handler(NotificationFn handler);
    std::vector<ReceivedNotification> drain_notifications();

    // ---- leases on local blocks, keyed by transfer id ------------------------------------
    // ttl must be positive (else Invalid); a ttl past the clock's range (milliseconds::max())
    // never expires.
    Result<void> lease(std::uint64_t transfer_id, LayoutId layout, std::span<const BlockId> ids,
                       std::chrono::milliseconds ttl);
    // The lease now expires ttl from now (ttl checked as in lease()).
    Result<void> renew(std::uint64_t transfer_id, std::chrono::milliseconds ttl);
    // Renews every listed lease that exists; returns how many (0 if ttl <= 0).
    std::size_t renew(std::span<const std::uint64_t> transfer_ids, std::chrono::milliseconds ttl);
    Result<void> release(std::uint64_t transfer_id);
    bool is_leased(LayoutId layout, BlockId id) const;
    // Removes every expired lease (full sweep) and returns their transfer ids. Also run by the
    // progress loop; every id expired there is kept (none dropped, 8 bytes each) and reported
    // by the next call as well: an application that leases must call this regularly.
    std::vector<std::uint64_t> expire_leases();

    // ---- progress ----------------------------------------------------------------------
    // EventFd mode: a file descriptor that becomes readable when progress() has work (backend
    // events, posted work, timers for deadlines and heartbeats). -1 in Thread mode.
    int event_fd() const;
    // Drives the backend, deadlines, heartbeats and callbacks. Returns the number of events.
    // EventFd mode: may also be busy-polled (call progress() and poll() in a loop without ever
    // arming or waiting, as ucx_perftest drives UCX): a call without work costs one backend
    // progress (over tcp one epoll_wait syscall) and no syscall of its own; deadlines,
    // heartbeats and lease expiry run at most once per millisecond.
    std::size_t progress();
    // Call before waiting on event_fd(): false means more work is pending (call progress()
    // again), true means it is safe to wait. Until the next wake-up, write_blocks/read_blocks
    // from any thread then make the fd readable; a caller that never arms (busy polling) gets
    // no wake-up writes at all.
    bool arm();

    Stats stats() const;

    class Impl;

private:
    explicit Agent(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> impl_;
};

}  // namespace pdx
