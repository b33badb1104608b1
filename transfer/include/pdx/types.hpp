#pragma once
// Public value types of the pdx transfer core: statuses, results, configuration, layouts,
// notifications, transfer results and statistics. Header-light: std only, no UCX, no Boost.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>

namespace pdx {

using Clock = std::chrono::steady_clock;
using RegionId = std::uint32_t;        // local memory region, from allocate_region/register_region
using LayoutId = std::uint32_t;        // block layout, local or (inside a descriptor) remote
using BlockId = std::uint32_t;         // block index inside a layout
using PeerHandle = std::uint64_t;      // one generation of one peer; never reused; 0 = none
using TransferHandle = std::uint64_t;  // one posted transfer; never reused; 0 = none

inline constexpr PeerHandle kNoPeer = 0;
inline constexpr TransferHandle kNoTransfer = 0;

// Config::default_deadline unless set (C: PDX_DEFAULT_DEADLINE_MS).
inline constexpr std::chrono::milliseconds kDefaultDeadline{30000};
// TransferRequest::deadline meaning "already expired" (C: deadline_ms = 0).
inline constexpr Clock::time_point kExpiredDeadline = Clock::time_point::min();

// Where a region's memory lives. Only Host is supported (a GPU kind is refused Unsupported).
enum class MemoryKind : std::uint8_t { Host = 0, Cuda = 1 };

// now + d without overflow: d <= 0 gives `now`, a d past the clock's range (e.g.
// milliseconds::max(), "forever") gives Clock::time_point::max(). The agent computes every
// deadline and lease expiry from a caller's duration with it; use it for
// TransferRequest::deadline too.
template <class Rep, class Period>
Clock::time_point deadline_after(std::chrono::duration<Rep, Period> d,
                                 Clock::time_point now = Clock::now()) {
    using D = std::chrono::duration<Rep, Period>;
    if (d <= D::zero()) {
        return now;
    }
    const auto headroom = Clock::time_point::max() - now;  // >= 0, in Clock ticks
    if (d >= std::chrono::duration_cast<D>(headroom)) {    // a coarser d: the cast cannot overflow
        return Clock::time_point::max();
    }
    return now + std::chrono::duration_cast<Clock::duration>(d);
}

// Stable numeric values (the C API exposes them as they are).
enum class Status : int {
    Ok = 0,
    InProgress = 1,   // transfer posted, not terminal yet
    PeerGone = 2,     // terminal: peer died, was removed, or was replaced by a new generation
    Expired = 3,      // terminal: deadline passed before completion
    Canceled = 4,     // terminal: cancel() was called
    Failed = 5,       // terminal: the backend reported an error
    Invalid = 6,      // request refused: empty, out of range, mismatched, oversize, bad blob...
    NotFound = 7,     // unknown or stale handle / id
    Busy = 8,         // refused: resource leased or in flight (e.g. release_region)
    Unsupported = 9,  // feature or backend not built in
};

const char* to_string(Status s) noexcept;
// Ok, PeerGone, Expired, Canceled and Failed are the terminal states of a transfer.
constexpr bool is_terminal(Status s) noexcept {
    return s == Status::Ok || s == Status::PeerGone || s == Status::Expired ||
           s == Status::Canceled || s == Status::Failed;
}

// A value or a status with a human-readable message (errors as values; no exceptions).
template <class T>
class Result {
public:
    Result(T value) : status_(Status::Ok), value_(std::move(value)) {}  // NOLINT implicit
    Result(Status status, std::string message) : status_(status), message_(std::move(message)) {}
    bool ok() const noexcept { return status_ == Status::Ok; }
    explicit operator bool() const noexcept { return ok(); }
    Status status() const noexcept { return status_; }
    const std::string& message() const noexcept { return message_; }
    T& value() { return value_; }
    const T& value() const { return value_; }
    T& operator*() { return value_; }
    const T& operator*() const { return value_; }
    T* operator->() { return &value_; }
    const T* operator->() const { return &value_; }

private:
    Status status_;
    std::string message_;
    T value_{};
};

template <>
class Result<void> {
public:
    Result() = default;
    Result(Status status, std::string message = {})  // NOLINT implicit
        : status_(status), message_(std::move(message)) {}
    bool ok() const noexcept { return status_ == Status::Ok; }
    explicit operator bool() const noexcept { return ok(); }
    Status status() const noexcept { return status_; }
    const std::string& message() const noexcept { return message_; }

private:
    Status status_ = Status::Ok;
    std::string message_;
};

enum class BackendKind : std::uint8_t {
    Ucx = 0,       // UCX (needs PDR_WITH_UCX); peers in other processes or hosts
    Loopback = 1,  // in-process memcpy between agents of the same process (unit tests)
};

enum class ProgressMode : std::uint8_t {
    Thread = 0,   // the agent runs its own progress thread
    EventFd = 1,  // the caller waits on event_fd() (e.g. from an Asio loop) and calls progress()
};

// UCX endpoint error mode. Auto: peers on another host use PEER mode (failures reported by
// UCX); same-host peers use NONE when shared-memory transports may be selected (PEER mode
// disables shm lanes) and rely on the core's heartbeats and deadlines.
enum class ErrorMode : std::uint8_t { Auto = 0, Peer = 1, None = 2 };

// How write_blocks moves data over UCX. Rma: ucp_put_nbx per merged run, then a flush. Am:
// each run (in pieces of at most 256 KiB) is an eager active message that the target's agent
// checks against its live regions, copies into the destination blocks and acknowledges; the
// write completes on the last acknowledgement. Auto: Am for peers whose endpoint runs over tcp
// only (UCX 1.13 acknowledges every put fragment there; active messages move 64 KiB-16 MiB
// writes at about twice the put rate), Rma otherwise (shared memory and RDMA transports have
// native puts). Reads always use gets.
enum class WriteProtocol : std::uint8_t { Auto = 0, Rma = 1, Am = 2 };

struct Config {
    // Agent name, carried in the descriptor. A non-empty name identifies one logical peer
    // across restarts: it must be unique among the agents a process adds as peers, and a
    // restarted process must keep it; add_peer then treats a new instance under that name as
    // the next generation and retires the old one. "" (the default) opts out: unnamed peers
    // are never replaced by another instance (each is its own peer, generation 1).
    std::string name;
    BackendKind backend = BackendKind::Ucx;
    ProgressMode progress = ProgressMode::Thread;
    std::string transports;   // UCX_TLS for this agent's context ("" = UCX's own choice / env)
    std::string net_devices;  // UCX_NET_DEVICES ("" = UCX's own choice / env), e.g. "lo"
    ErrorMode error_mode = ErrorMode::Auto;
    WriteProtocol write_protocol = WriteProtocol::Auto;
    std::string host_id;  // same-host detection key ("" = hostname + boot id)
    std::chrono::milliseconds heartbeat_interval{1000};
    std::chrono::milliseconds peer_timeout{3000};  // no message for this long => PeerGone
    std::chrono::milliseconds default_deadline = kDefaultDeadline;  // <= 0: kDefaultDeadline
    std::uint64_t max_transfer_bytes = std::uint64_t{1} << 36;      // larger: Invalid; 0: default
    std::uint32_t max_blocks_per_transfer = 1u << 20;               // longer: Invalid; 0: default
    std::size_t completed_history = 65536;  // terminal transfers kept for poll()
    // Stats::post and Stats::completion: two timestamps per transfer (TSC reads on x86-64,
    // still ~2-3 % of a 64 KiB shm write). false: both stay zero and a request that carries
    // its own deadline is posted without reading any clock. Other statistics are always kept.
    bool latency_stats = true;
    // Requests of at most this many operations (after merging) and bytes are posted on the
    // caller's thread (lowest latency; over shm the copy runs inside write_blocks); larger ones,
    // and any request behind a queued one, are posted by the progress context in chunks.
    // inline_post_ops = 0: always queue. Peers in UCX peer-failure mode have no shm lanes (tcp
    // or remote): for them the smaller inline_post_bytes_peer_mode applies, so a socket write
    // of a large request does not block the caller.
    std::uint32_t inline_post_ops = 16;
    std::uint64_t inline_post_bytes = std::uint64_t{1} << 20;
    std::uint64_t inline_post_bytes_peer_mode = std::uint64_t{8} << 10;
    // Thread mode: after an event, the progress thread keeps polling the transport this long
    // before it sleeps again, so the next event of a steady stream needs no wake-up (the thread
    // keeps a core busy that long). 0 (default): sleep as soon as nothing is pending. See
    // docs/transfer.md, Tuning (+5-15 % for 64 KiB tcp writes on 2 cores at 100 us).
    std::chrono::microseconds progress_spin{0};
};

// Blocks of one layout: block i lives at region base + offset + i * stride, block_bytes long.
struct Layout {
    RegionId region = 0;
    std::uint64_t offset = 0;
    std::uint64_t block_bytes = 0;
    std::uint64_t stride = 0;  // 0 = block_bytes (dense)
    std::uint32_t count = 0;
};

enum class NotifyKind : std::uint8_t {
    Done = 1,       // data of transfer_id is flushed to the target
    Failed = 2,     // a transfer failed; the receiver should stop waiting
    Register = 3,   // receiver-side blocks are ready (payload: block ids, app-defined)
    Heartbeat = 4,  // liveness / lease renewal (the core sends its own; those are not delivered)
    Abort = 5,      // the transfer is abandoned; release its blocks
};

// Wire header: 40 bytes, little-endian (magic "PDXN", version, kind, flags, transfer id,
// sequence, expected count, status, payload length, sender instance nonce) + payload.
struct Notification {
    NotifyKind kind = NotifyKind::Done;
    std::uint64_t transfer_id = 0;
    std::uint32_t sequence = 0;  // e.g. index of this message among `expected`
    std::uint32_t expected = 0;  // e.g. how many Done messages complete the request
    Status status = Status::Ok;
    std::string payload;  // at most kMaxNotifyPayload bytes
};
inline constexpr std::size_t kMaxNotifyPayload = 4096;

struct ReceivedNotification {
    PeerHandle peer = kNoPeer;  // kNoPeer if the sender was not added with add_peer
    std::string peer_name;      // empty if unknown
    std::uint64_t sender_instance = 0;
    Notification notification;
};

enum class Direction : std::uint8_t { Write = 0, Read = 1 };

struct TransferResult {
    TransferHandle handle = kNoTransfer;
    std::uint64_t transfer_id = 0;
    PeerHandle peer = kNoPeer;
    Direction direction = Direction::Write;
    Status status = Status::InProgress;
    std::uint64_t bytes = 0;
    std::uint32_t descriptors = 0;  // operations after sorting and merging
    std::string message;            // why, for non-Ok states
};

// Why a peer handle stopped being alive (PeerEvent). Stable values (the C API uses them).
enum class PeerGoneReason : std::uint8_t {
    Removed = 1,          // remove_peer()
    Replaced = 2,         // a new generation of the same name was added
    Timeout = 3,          // nothing heard for Config::peer_timeout (counted from add_peer)
    Exited = 4,           // same host: its process ended (pidfd), or had ended before add_peer
    ConnectionError = 5,  // the transport reported the connection failed (UCX peer mode)
};

// Sent once per peer handle when it stops being alive, whatever the reason.
struct PeerEvent {
    PeerHandle peer = kNoPeer;
    std::string name;
    std::uint64_t instance = 0;
    std::uint32_t generation = 0;
    PeerGoneReason reason = PeerGoneReason::Removed;
    std::string message;  // e.g. "no heartbeat for 3012 ms", "process 1234 exited"
};

using CompletionFn = std::function<void(const TransferResult&)>;
using NotificationFn = std::function<void(const ReceivedNotification&)>;
using PeerEventFn = std::function<void(const PeerEvent&)>;

struct PeerInfo {
    PeerHandle handle = kNoPeer;
    std::string name;
    std::uint64_t instance = 0;  // the peer process's random nonce
    // 1 for the first life seen under this (non-empty) name, then +1; always 1 when unnamed
    std::uint32_t generation = 0;
    bool alive = false;
    bool same_host = false;
    bool peer_error_mode = false;  // UCX endpoint uses UCP_ERR_HANDLING_MODE_PEER
    bool am_writes = false;        // writes to it go as active messages (WriteProtocol)
    // Same host and pid namespace: its process is watched (pidfd), so its death is seen at
    // once rather than after peer_timeout.
    bool process_watched = false;
    // Milliseconds since the last message (heartbeat or notification) from the peer; -1 if it
    // never sent one (heartbeat liveness applies only once a peer has been heard from).
    std::int64_t ms_since_heard = -1;
    std::uint32_t layouts = 0;
};

struct RegionInfo {
    RegionId region = 0;
    std::uint64_t bytes = 0;
    MemoryKind kind = MemoryKind::Host;
    bool allocated = false;  // allocate_region (UCX-allocated) rather than register_region
    // Shared-memory puts and gets can reach it: UCX allocated it, or no shm transport is in
    // use. false: caller memory with shm possible; same-host peers go through a slower
    // transport (tcp or cma), so allocate KV pools with allocate_region.
    bool shm_rma = false;
    std::uint32_t transfers_in_flight = 0;  // operations still using it (settling included)
    // Of those, transfers that already ended (Expired, Canceled, PeerGone of a peer that may
    // still run) while operations they posted still run: release_region is Busy until they
    // complete, although Stats::transfers_in_flight no longer counts them.
    std::uint32_t transfers_settling = 0;
    std::uint32_t leases = 0;
};

struct LatencyStat {
    std::uint64_t count = 0;
    std::uint64_t total_ns = 0;
    std::uint64_t max_ns = 0;
    double mean_us() const { return count ? double(total_ns) / double(count) / 1000.0 : 0.0; }
};

struct Stats {
    std::uint64_t bytes_written = 0;
    std::uint64_t bytes_read = 0;
    std::uint64_t transfers_posted = 0;
    std::uint64_t transfers_ok = 0;
    std::uint64_t transfers_failed = 0;
    std::uint64_t transfers_expired = 0;
    std::uint64_t transfers_canceled = 0;
    std::uint64_t transfers_peer_gone = 0;
    std::uint64_t transfers_refused = 0;  // requests rejected before posting (Invalid etc.)
    std::uint64_t transfers_in_flight = 0;
    std::uint64_t blocks_requested = 0;    // block ids given by callers
    std::uint64_t descriptors_posted = 0;  // operations after merging
    std::uint64_t notifications_sent = 0;
    std::uint64_t notifications_received = 0;
    // Notifications the transport refused (the peer's connection was already gone), a write's
    // Done or Failed included: the write's result stays Ok with the reason in its message.
    std::uint64_t notifications_failed = 0;
    std::uint64_t leases_active = 0;
    std::uint64_t leases_expired = 0;
    std::uint64_t peers = 0;       // alive peers
    std::uint64_t peers_gone = 0;  // peers declared gone (dead, removed or replaced)
    // Transfers that reached their terminal state (Expired, Canceled, PeerGone of a peer that
    // may still run...) while operations they posted still run: their regions stay pinned
    // (release_region: Busy) until those settle. Not counted in transfers_in_flight.
    std::uint64_t transfers_settling = 0;
    // Regions of caller memory (register_region) while shared-memory transports may be used:
    // UCX can do shm RMA only on memory it allocated, so peers on this host reach these
    // regions through a slower path (see RegionInfo::shm_rma).
    std::uint64_t regions_without_shm = 0;
    LatencyStat post;        // time spent inside write_blocks/read_blocks (*)
    LatencyStat completion;  // post to terminal Ok (*)
    // (*) only with Config::latency_stats (the default); zero without it
    double descriptors_per_transfer() const {
        return transfers_posted ? double(descriptors_posted) / double(transfers_posted) : 0.0;
    }
};

}  // namespace pdx
