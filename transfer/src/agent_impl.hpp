#pragma once
// The agent core: ids, validation, peers and generations, deadlines, heartbeats, leases,
// notifications and stats around a Backend. One mutex guards everything; user callbacks are
// queued and run after it is released, on the progress context.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "backend.hpp"
#include "history.hpp"
#include "latency_clock.hpp"
#include "lease_table.hpp"
#include "pdx/agent.hpp"
#include "process.hpp"

namespace pdx {

// The agent's one mutex. The progress loop takes it again right after it let go, many times
// a millisecond under a message flood, and a plain mutex is not fair: a caller of the API
// (drain_notifications, stats, write_blocks...) woken on its release lost the race every
// time and waited hundreds of ms, so a flooded agent looked deaf to its application. Callers
// say they wait (lock()); the progress loop (lock_for_progress()) then waits until one of them
// has had the lock (served_ moved), not just for a number of yields: on a loaded machine a
// woken caller may not run for milliseconds, and yields alone left it starved for tens of
// seconds while the agent kept receiving. The wait is bounded (kGiveWayFor), so a caller that
// is never scheduled cannot stop progress either.
class AgentMutex {
public:
    void lock() {
        waiting_.fetch_add(1, std::memory_order_relaxed);
        m_.lock();
        waiting_.fetch_sub(1, std::memory_order_relaxed);
        served_.fetch_add(1, std::memory_order_relaxed);
    }
    bool try_lock() { return m_.try_lock(); }
    void unlock() { m_.unlock(); }
    void lock_for_progress() {
        if (waiting_.load(std::memory_order_relaxed) > 0) {
            const std::uint64_t served = served_.load(std::memory_order_relaxed);
            const auto until = std::chrono::steady_clock::now() + kGiveWayFor;
            for (int i = 0; waiting_.load(std::memory_order_relaxed) > 0 &&
                            served_.load(std::memory_order_relaxed) == served;
                 ++i) {
                if (i < kYields) {
                    std::this_thread::yield();
                } else if (std::chrono::steady_clock::now() < until) {
                    std::this_thread::sleep_for(std::chrono::microseconds(50));
                } else {
                    break;
                }
            }
        }
        m_.lock();
    }

private:
    static constexpr int kYields = 64;  // then short sleeps: the caller may need our CPU
    static constexpr std::chrono::milliseconds kGiveWayFor{50};
    std::mutex m_;
    std::atomic<int> waiting_{0};
    std::atomic<std::uint64_t> served_{0};
};

// A lock_guard for the progress loop's side of AgentMutex.
class ProgressLock {
public:
    explicit ProgressLock(AgentMutex& m) : m_(m) { m_.lock_for_progress(); }
    ~ProgressLock() { m_.unlock(); }
    ProgressLock(const ProgressLock&) = delete;
    ProgressLock& operator=(const ProgressLock&) = delete;

private:
    AgentMutex& m_;
};

class Agent::Impl final : public detail::BackendEvents {
public:
    explicit Impl(const Config& config);
    ~Impl() override;
    Result<void> start();  // creates the backend, fds and (Thread mode) the progress thread

    // BackendEvents (called with mu_ held, from inside backend calls)
    void on_op_complete(std::uint64_t op, Status status, std::string message) override;
    void on_message(std::span<const std::byte> message) override;
    void on_conn_error(std::uint64_t conn, std::string message) override;

    struct Region {
        detail::LocalRegion mem;
        bool live = false;
        std::uint32_t ops = 0;  // backend operations still referencing it
    };
    enum class PeerState { Alive, Gone, Replaced };
    struct Peer {
        // what post() reads first, in one cache line with the start of desc
        PeerHandle handle = kNoPeer;
        std::uint64_t conn = 0;
        PeerState state = PeerState::Alive;
        bool peer_error_mode = false;
        bool same_host = false;
        bool heard = false;
        detail::Descriptor desc;
        std::string name;
        std::uint64_t instance = 0;
        std::uint32_t generation = 0;
        std::string host_id;
        std::string gone_reason;
        Clock::time_point last_heard{};    // the last message, or add_peer (liveness starts there)
        Clock::time_point connected_at{};  // add_peer: when this connection was made
        Clock::time_point gone_at{};       // when it was declared gone (its connection closed)
        std::unordered_set<TransferHandle> in_flight;
        // Same host and pid namespace: the peer's process (Running: its pidfd is in epoll_fd_).
        detail::ProcessWatch process;
        bool ended = false;  // its process was seen ended: declared gone by the next tick
    };
    // Batches: the segments of one (local region, remote region) pair, posted in order.
    struct Part {
        RegionId region = 0;
        std::uint32_t remote_region = 0;
        std::vector<detail::Segment> segments;
    };
    struct Xfer {
        TransferResult res;
        std::uint64_t posted = 0;  // LatencyClock ticks (with Config::latency_stats)
        Clock::time_point deadline{};
        RegionId region = 0;  // the region `queued` is posted from (and pinned, unless batch)
        std::uint64_t conn = 0;
        std::uint32_t remote_region = 0;
        std::vector<RegionId> pinned;         // batches: every local region pinned (each once)
        std::vector<Part> later;              // batches: parts posted after `queued`, in order
        bool backend_pending = true;          // the backend or the post queue may touch its memory
        std::uint32_t ops = 0;                // backend operations (chunks) outstanding
        std::vector<detail::Segment> queued;  // segments left for the progress context
        std::size_t next = 0;                 // first segment of `queued` not yet posted
        Status op_status = Status::Ok;        // first backend failure
        std::string op_message;
        std::optional<Notification> notify;
        // A write that ended (not Ok) while chunks were still posted: its Failed notification
        // waits for them (settle()), so it cannot reach the target ahead of data that lands.
        bool failed_note_due = false;
        CompletionFn on_complete;
    };

    // memory / peers (agent.cpp)
    Result<RegionId> add_region(Result<detail::LocalRegion> r);
    Result<Peer*> live_peer(PeerHandle h);
    // add_peer with mu_ held. `may_tell_reconnect`: when the descriptor's instance was declared
    // gone here before, its first heartbeat asks it to connect again (kNotifyFlagReconnect);
    // false when this add is itself the answer to such a request (no ping-pong).
    Result<PeerHandle> add_peer_locked(detail::Descriptor d, bool may_tell_reconnect);
    // The live peers whose message asked for a new connection (kNotifyFlagReconnect): each is
    // retired (Replaced: its transfers end PeerGone) and connected again from its descriptor
    // under a new handle. Run by progress() after the backend's round, not inside it.
    void reconnect_pending_locked();
    std::vector<PeerHandle> reconnect_;
    // Ends the peer's transfers (PeerGone), closes its connection (Graceful unless the peer is
    // known dead: Exited, ConnectionError; see Backend::disconnect) and queues its PeerEvent.
    void peer_gone(Peer& p, PeerState state, PeerGoneReason why, const std::string& reason);
    // Same-host peers: true if the peer's process was seen ended (one pidfd poll).
    bool process_ended(Peer& p);
    void watch_process(Peer& p, bool on);  // adds/removes its pidfd in epoll_fd_
    bool decide_peer_error_mode(bool same_host) const;
    bool region_shm_rma(RegionId region) const;  // see RegionInfo::shm_rma
    // Transfers that ended while operations they posted from `region` still run (settling).
    std::uint32_t settling_on(RegionId region) const;
    bool shm_possible() const;      // the transport list (or UCX_TLS) may select shared memory
    bool warned_register_ = false;  // (mu_) the register_region warning was given
    PeerInfo info(const Peer& p) const;

    // transfers / progress (agent_transfer.cpp)
    Result<TransferHandle> post(const TransferRequest& req, Direction dir);
    Result<TransferHandle> post_batch(const TransferRequest& req, Direction dir);
    static TransferResult new_result(TransferHandle h, const TransferRequest& req, PeerHandle peer,
                                     Direction dir, std::uint64_t bytes, std::uint32_t descriptors,
                                     Status status) {
        TransferResult r;
        r.handle = h;
        r.transfer_id = req.transfer_id;
        r.peer = peer;
        r.direction = dir;
        r.status = status;
        r.bytes = bytes;
        r.descriptors = descriptors;
        return r;
    }
    // Splits segments longer than kChunkBytes (order kept): bounds one chunk's lock hold time.
    static void split_large(std::vector<detail::Segment>& segs);
    static bool known_kind(NotifyKind k) {  // the kinds a caller may send
        return static_cast<int>(k) >= 1 && static_cast<int>(k) <= 5;
    }
    // A request with kExpiredDeadline: accepted, ended Expired at once (lock held).
    TransferHandle expire_at_once(const TransferRequest& req, Direction dir, const Peer& peer,
                                  std::uint64_t bytes, std::uint32_t descriptors);
    void finish(TransferHandle h, Xfer& x, Status s, std::string message);
    // finish()'s parts, shared with a transfer that completes inside post() (no Xfer record):
    // the counters of a terminal result, a write's Done notification (a failed send is noted
    // in res.message), and the history, completion callback and waiters.
    void count_terminal(const TransferResult& res, std::uint64_t posted);
    void send_done_locked(Peer& p, const Notification& n, TransferResult& res);
    void record_terminal(TransferHandle h, const TransferResult& res, CompletionFn on_complete);
    // Finishes and forgets `it` once neither the backend nor the post queue references it.
    void settle(std::unordered_map<TransferHandle, Xfer>::iterator it);
    bool pump_locked();  // posts one queued chunk; true if more chunks wait
    bool needs_progress_locked() const;
    void drop_backend_op(Xfer& x);
    Result<void> send_locked(Peer& p, const Notification& n, std::uint8_t flags);
    void send_failed_locked(Peer& p, const Xfer& x);  // the Failed note of a write that ended
    std::size_t progress();
    bool arm();
    void tick_locked(Clock::time_point now);
    void wake();
    void drain_wake_locked();  // reads the wake-up fd if wake() wrote it
    void thread_main();
    void run_callbacks();

    Config cfg_;
    std::uint64_t instance_ = 0;
    std::string host_id_;
    mutable AgentMutex mu_;
    std::condition_variable_any cv_;
    std::unique_ptr<detail::Backend> backend_;

    std::vector<Region> regions_;
    std::vector<Layout> layouts_;  // stride normalised

    std::unordered_map<PeerHandle, Peer> peers_;
    std::unordered_map<std::uint64_t, PeerHandle> by_instance_;
    // Named peers only (an empty name has no generations; see Config::name).
    std::unordered_map<std::string, PeerHandle> by_name_;  // the newest generation's handle
    struct NameRecord {
        std::uint32_t generations = 0;  // lives added under the name
        std::uint64_t instance = 0;     // the newest one's instance (even if removed since)
    };
    std::unordered_map<std::string, NameRecord> names_;
    // Instances a newer generation of the same name replaced: add_peer refuses them for good.
    std::unordered_set<std::uint64_t> superseded_;
    std::unordered_map<std::uint64_t, PeerHandle> by_conn_;
    PeerHandle next_peer_ = 0;
    PeerHandle last_peer_handle_ = kNoPeer;  // live_peer()'s cache of the last peer looked up
    Peer* last_peer_ = nullptr;              // (nodes stay put until erased; erase resets it)

    std::unordered_map<TransferHandle, Xfer> xfers_;
    std::deque<TransferHandle> post_queue_;  // transfers with segments left to post, FIFO
    detail::Plan plan_;                      // post()'s scratch plan (capacity reused)
    detail::History history_;  // the newest Config::completed_history terminal results
    // The terminal status of recently finished transfers for poll() without the lock: slot
    // handle & mask holds (handle << 8) | status, written under mu_ (release) when the transfer
    // ends and cleared when the history lets it go, so poll() answers from it exactly what the
    // history would. A handle that does not fit 56 bits is never found there (locked path).
    std::unique_ptr<std::atomic<std::uint64_t>[]> done_slots_;
    std::uint64_t done_mask_ = 0;
    static constexpr std::uint64_t kMaxDoneSlots = 4096;
    TransferHandle next_xfer_ = 0;

    std::vector<std::pair<CompletionFn, TransferResult>> callbacks_;
    std::vector<PeerEvent> peer_events_;  // waiting for the peer handler
    PeerEventFn peer_handler_;
    detail::ProcessId process_;                   // this process, as descriptors carry it
    std::vector<ReceivedNotification> received_;  // (mu_) waiting for handler dispatch
    // No handler: kept for drain_notifications, under its own lock (taken after mu_, never
    // before it), so the application drains without waiting for the progress loop's sections
    // of mu_: under a flood on a loaded machine a drain that needed mu_ waited 10-80 s.
    std::mutex notes_mu_;
    std::vector<ReceivedNotification> undrained_;
    NotificationFn notification_handler_;
    std::mutex callback_mu_;  // one callback runner at a time

    detail::LeaseTable leases_;
    std::vector<std::uint64_t> expired_leases_;
    Stats stats_;  // post / completion stay zero here: they are kept in ticks below
    detail::LatencyClock latency_clock_;
    detail::TickStat post_ticks_;        // (mu_)
    detail::TickStat completion_ticks_;  // (mu_)

    int wake_fd_ = -1;
    int timer_fd_ = -1;
    int epoll_fd_ = -1;
    std::thread thread_;
    std::atomic<bool> stop_{false};
    std::atomic<bool> wake_signalled_{false};  // wake() wrote wake_fd_ since progress() drained it
    // (mu_) Thread mode: the progress thread is (about to be) blocked in epoll_wait. EventFd
    // mode: arm() returned true since the last wake-up, i.e. a caller may be waiting on the
    // fd (initially true). post() writes the wake-up fd only while it is set, and clears it.
    bool sleeping_ = false;
    int waiters_ = 0;  // (mu_) callers blocked in wait() on cv_
    // (mu_) LatencyClock ticks, set while post() delivers inline completions
    std::uint64_t now_ = 0;
    Xfer* inline_xfer_ = nullptr;  // (mu_) the transfer post() is completing inline
    TransferHandle inline_op_ = 0;
    Peer* inline_peer_ = nullptr;  // (mu_) its peer
    Clock::time_point next_heartbeat_{};
    Clock::time_point next_tick_{};  // (mu_) progress() runs tick_locked() from then on
    static constexpr std::chrono::milliseconds kTick{10};      // sleep bound / EventFd timer period
    static constexpr std::chrono::milliseconds kTickEvery{1};  // tick_locked() at most this often
    // Queued requests (see Config::inline_post_*) are posted in chunks of at most these sizes.
    static constexpr std::size_t kChunkSegments = 128;
    static constexpr std::uint64_t kChunkBytes = std::uint64_t{4} << 20;
    static constexpr int kChunksPerProgress = 8;
    // Same-host peers without UCX peer error mode (shm lanes possible): an Ok of at least this
    // many bytes, or one reported on the progress context, is preceded by a pidfd poll of the
    // target's process; smaller writes completed
    // inside write_blocks rely on the tick's poll (<= kTickEvery old when busy polling) and on
    // the pidfd waking the progress context (a poll per write cost 0.3-4 us here).
    static constexpr std::uint64_t kLivenessCheckBytes = 256 * 1024;
};

}  // namespace pdx
