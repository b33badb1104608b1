#pragma once
// KvReadyListener (PROTOCOLS.md §5, step 3): the router's ZMQ PULL socket for LMCache's "KV ready"
// notifications, and the waits of the requests that expect them.
//
//   auto reg = kv_ready.expect(req_id, d_tp_size);   // before P gets the request
//   if (!reg.ok()) → 503 with reg.error()
//   ... P answers ...
//   WaitEnd end = co_await reg.wait(deadline);        // Ready | TimedOut | Stopped | Cancelled
//   ... D leg; `reg` goes out of scope when the request ends
//
// Each prefill TP rank PUSHes one msgpack map per finished request (kv_ready_frame.hpp); the
// counting, and what happens to notifications nobody waits for, is KvReadyTable's. A wait ends
// when `expected` notifications arrived for the id, at the deadline, at stop(), or at once when
// the awaiting coroutine is cancelled through its cancellation slot: the server's client-gone
// signal (terminal), or any type the coroutine's filter lets through (total, with
// enable_total_cancellation; nothing is left half done). The Registration's destruction then
// turns the entry into a tombstone. One steady_timer per wait, cancelled by the notification
// that completes it.
//
// Asio integration: the socket's ZMQ_FD in a posix::stream_descriptor. ZMQ_FD is edge-
// triggered, so each wake-up receives with ZMQ_DONTWAIT until EAGAIN and then re-reads
// ZMQ_EVENTS (which also re-arms the descriptor) before waiting again; at most kBatch messages
// are taken before the loop lets other handlers run. No thread of ours, no polling.
//
// Frame limits: a message larger than max_frame_bytes (1024: the largest valid notification,
// a 256-byte req_id, is under 300) is counted as malformed (too_large) and dropped;
// ZMQ_MAXMSGSIZE is kMaxMsgFactor × max_frame_bytes, and a peer that sends a message larger
// than that is disconnected by libzmq (its PUSH socket reconnects; that message and any it had
// in flight are lost). libzmq 4.3 does not say why it dropped a connection, so those are
// counted with every other ended connection, in pdrouter_kv_ready_disconnects_total (a socket
// monitor). Memory: at most max_pending entries of at most KvReadyTable::kMaxIdBytes of id
// each, plus rcvhwm queued messages of at most ZMQ_MAXMSGSIZE.
//
// Who may send (kv_ready_guard.hpp): with an allow-list or CURVE the listener is its context's
// ZAP handler (a REP socket on inproc://zeromq.zap.01, on the same executor), and each refused
// connection counts in pdrouter_kv_ready_refused_total{reason} (address, key) and in the
// 10 s warning with the last refused address.
//
// Several replicas (issue 18): with a replica id, a notification whose req_id names another
// replica (kv_ready_owner.hpp) is not this one's: it goes to the forwarder, unchanged, and is
// counted in pdrouter_kv_ready_forwarded_total{result} (sent, queue_full, unknown_owner). A
// two-part message [kForwardedMark, frame] is one a peer forwarded: it is taken when it is ours
// (received) and dropped otherwise (not_owner), never forwarded again, so nothing loops. The
// drops are logged with the malformed summary. A req_id without '@' is this replica's.
//
// Threads: the executor passed in is the control executor (net/common/shared_state.hpp; its
// handlers hold SharedLock). expect() and the Registration's members take SharedLock and may be
// used on any worker thread; a wait's timer is on the waiting coroutine's own executor, and a
// notification wakes it by posting there. Lifetime: Registrations must not outlive the
// listener; call stop() and let the io_contexts finish before destroying it.
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "net/common/io.hpp"
#include "net/common/task_group.hpp"
#include "router/kv/kv_ready_guard.hpp"
#include "router/kv/kv_ready_table.hpp"
#include "router/metrics/router_metrics.hpp"

namespace pdr::kv {

class KvReadyForwarder;

enum class WaitEnd {
    Ready,      // `expected` notifications arrived
    TimedOut,   // the deadline passed first
    Stopped,    // the listener stopped (or the Registration is empty)
    Cancelled,  // the awaiting coroutine was cancelled (the client went away)
};
std::string_view to_string(WaitEnd e) noexcept;  // "ready", "timed_out", "stopped", "cancelled"

struct KvReadyOptions {
    std::string bind;      // tcp://HOST:PORT; port 0 (or `*` for the host) binds what is free
    Duration ttl{30'000};  // how long unclaimed notifications and finished ids are kept
    std::size_t max_pending = 65'536;  // entries in the table, at most
    std::size_t max_frame_bytes = 1024;
    int rcvhwm = 1000;                      // ZMQ_RCVHWM: messages queued in the socket, at most
    std::string replica_id;                 // "": one replica, every notification is ours
    KvReadyForwarder* forwarder = nullptr;  // other replicas' notifications go there
    KvReadyGuardOptions guard = {};         // who may connect (default: anyone)
};

class KvReadyListener {
public:
    static constexpr std::size_t kBatch = 256;        // messages per turn of the loop
    static constexpr std::int64_t kMaxMsgFactor = 4;  // ZMQ_MAXMSGSIZE / max_frame_bytes
    static constexpr Duration kLogInterval{10'000};   // malformed/unknown summary, at most

    KvReadyListener(net::any_io_executor ex, KvReadyOptions opts, metrics::RouterMetrics& m);
    ~KvReadyListener();
    KvReadyListener(const KvReadyListener&) = delete;
    KvReadyListener& operator=(const KvReadyListener&) = delete;

    // Binds the PULL socket and starts receiving and sweeping. False with a message in `error`
    // (not tcp://, bad address, port in use, a key file that cannot be used, already started or
    // stopped).
    bool start(std::string& error);
    // Closes the socket (linger 0), stops the loops and ends every wait with Stopped; later
    // expect() calls are refused. Idempotent.
    void stop();
    // The endpoint actually bound (ZMQ_LAST_ENDPOINT, e.g. tcp://127.0.0.1:41234) after start().
    const std::string& endpoint() const noexcept { return endpoint_; }

    // Move-only RAII: a request's claim on its id's notifications. Destruction (or reset())
    // ends it: the entry becomes a tombstone until the TTL. Not to be moved while wait() runs.
    class Registration {
    public:
        Registration() = default;
        Registration(Registration&& o) noexcept;
        Registration& operator=(Registration&& o) noexcept;
        Registration(const Registration&) = delete;
        Registration& operator=(const Registration&) = delete;
        ~Registration() { reset(); }

        bool ok() const noexcept { return owner_ != nullptr; }
        explicit operator bool() const noexcept { return ok(); }
        // Why expect() refused ("kv-ready table full", ...); empty when ok().
        std::string_view error() const noexcept { return error_; }
        const std::string& req_id() const noexcept { return id_; }
        std::size_t expected() const noexcept { return expected_; }
        std::size_t received() const;  // notifications counted for the id so far
        bool ready() const;            // received() >= expected()

        // Waits until ready, the deadline, stop() or cancellation (see the top of the file).
        // Notifications that arrived before are counted; ready at once if they suffice.
        awaitable<WaitEnd> wait(Clock::time_point deadline);

        void reset();  // same as destruction

    private:
        friend class KvReadyListener;
        Registration(KvReadyListener* owner, std::string id, std::size_t expected)
            : owner_(owner), id_(std::move(id)), expected_(expected) {}
        explicit Registration(std::string_view error) : error_(error) {}

        KvReadyListener* owner_ = nullptr;
        std::string id_;
        std::size_t expected_ = 0;
        std::string_view error_;
    };

    // Registers `req_id` for `expected` notifications (D's TP size; at least 1). Refused (check
    // ok()) when the table is full of live registrations, the id is registered already, is empty
    // or longer than KvReadyTable::kMaxIdBytes, or the listener stopped.
    Registration expect(std::string req_id, std::size_t expected);

    const KvReadyTable& table() const noexcept { return table_; }
    // Who may connect, after start() (null before): its CURVE keys, the allow-list.
    const KvReadyGuard* guard() const noexcept { return guard_ ? &*guard_ : nullptr; }

private:
    // context, PULL socket, ZAP and monitor sockets and their ZMQ_FDs (zmq.hpp stays out of
    // this header)
    struct Zmq;
    enum class Drain { Empty, More, Failed };
    enum class Sock { Pull, Zap, Monitor };

    Drain drain(Sock which);
    void drain_pull(Clock::time_point now, std::size_t& taken);
    void drain_zap(std::size_t& taken);
    void drain_monitor(std::size_t& taken);
    void on_frame(std::string_view bytes, Clock::time_point now, bool forwarded);
    // False when the frame is another replica's (forwarded or dropped, and counted).
    bool is_ours(const std::string& req_id, std::string_view bytes, bool forwarded);
    void note_malformed(metrics::KvReadyMalformed reason, Clock::time_point now);
    void log_problems(Clock::time_point now);
    void publish();  // table size and new evictions → metrics
    // Wakes a wait (its timer's executor, found again there by id and serial).
    void wake(KvReadyWaker& w);
    awaitable<void> receive_loop(Sock which);
    awaitable<void> sweep_loop();

    net::any_io_executor ex_;
    KvReadyOptions opts_;
    metrics::RouterMetrics& metrics_;
    KvReadyTable table_;
    std::uint64_t next_waker_serial_ = 0;
    KvReadyTable::Evictions published_;
    std::optional<KvReadyGuard> guard_;
    std::unique_ptr<Zmq> zmq_;
    std::string endpoint_;

    // Problems since the last warning: malformed by reason, then unknown ids.
    std::array<std::uint64_t, metrics::kKvReadyMalformedCount> malformed_since_log_{};
    std::uint64_t unknown_since_log_ = 0;
    std::uint64_t not_forwarded_since_log_ = 0;  // queue_full, unknown_owner, not_owner
    std::uint64_t refused_since_log_ = 0;        // connections refused by the guard
    std::string last_refused_;                   // "ADDR (why)" of the last of them
    Clock::time_point last_log_{};

    Timer sweep_timer_;
    bool started_ = false;
    bool stopped_ = false;
    // The receive and sweep loops. Last member: destroyed first, so a loop resuming later
    // touches nothing.
    TaskGroup tasks_;
};

}  // namespace pdr::kv
