// KvReadyListener: LMCache "KV ready" notifications from a ZMQ PULL socket, driven by the
// router's executor through the socket's ZMQ_FD (PROTOCOLS.md §5).
#include "router/kv/kv_ready_listener.hpp"

#include <algorithm>
#include <cstring>
#include <utility>

#include <zmq.hpp>

#include "net/common/log.hpp"
#include "net/common/shared_state.hpp"
#include "router/kv/kv_ready_forwarder.hpp"
#include "router/kv/kv_ready_frame.hpp"
#include "router/kv/kv_ready_owner.hpp"

namespace pdr::kv {

// A wait's timer, in the waiting coroutine's frame, on the waiter's executor (a worker's); the
// table keeps a pointer to it while the wait runs so that the completing notification (or
// stop()) can wake it: wake() posts the cancel to the waiter's executor, where it finds the
// waker again by id and serial (the wait may have ended meanwhile, on that thread).
struct KvReadyWaker {
    Timer timer;
    std::string id;
    std::uint64_t serial = 0;
};

namespace {

constexpr std::string_view kLog = "kv-ready";
using Descriptor = TupleToken::as_default_on_t<net::posix::stream_descriptor>;

metrics::KvReadyOutcome outcome_of(KvReadyTable::Outcome o) noexcept {
    switch (o) {
        case KvReadyTable::Outcome::Matched:
            return metrics::KvReadyOutcome::Matched;
        case KvReadyTable::Outcome::Early:
            return metrics::KvReadyOutcome::Early;
        case KvReadyTable::Outcome::Duplicate:
            return metrics::KvReadyOutcome::Duplicate;
        case KvReadyTable::Outcome::Unknown:
            return metrics::KvReadyOutcome::Unknown;
    }
    return metrics::KvReadyOutcome::Unknown;
}

std::string_view refusal(KvReadyTable::Expect e) noexcept {
    switch (e) {
        case KvReadyTable::Expect::Ok:
            return {};
        case KvReadyTable::Expect::Full:
            return "kv-ready table full";
        case KvReadyTable::Expect::InUse:
            return "kv-ready: req_id already registered";
        case KvReadyTable::Expect::BadId:
            return "kv-ready: req_id empty or longer than 256 bytes";
    }
    return "kv-ready: refused";
}

bool is_ipv6_bind(std::string_view bind) {
    return bind.substr(0, 7) == "tcp://[";
}

}  // namespace

std::string_view to_string(WaitEnd e) noexcept {
    switch (e) {
        case WaitEnd::Ready:
            return "ready";
        case WaitEnd::TimedOut:
            return "timed_out";
        case WaitEnd::Stopped:
            return "stopped";
        case WaitEnd::Cancelled:
            return "cancelled";
    }
    return "stopped";
}

struct KvReadyListener::Zmq {
    explicit Zmq(const net::any_io_executor& ex)
        : context(1),
          zap(context, zmq::socket_type::rep),
          monitor(context, zmq::socket_type::pair),
          socket(context, zmq::socket_type::pull),
          fd(ex),
          zap_fd(ex),
          monitor_fd(ex) {}
    ~Zmq() {
        // libzmq owns the descriptors: take them back from Asio (which cancels a pending wait)
        // before the sockets close them.
        (void)fd.release();
        (void)zap_fd.release();
        (void)monitor_fd.release();
    }
    zmq::socket_t& sock(Sock s) {
        return s == Sock::Pull ? socket : s == Sock::Zap ? zap : monitor;
    }
    Descriptor& desc(Sock s) { return s == Sock::Pull ? fd : s == Sock::Zap ? zap_fd : monitor_fd; }

    zmq::context_t context;
    zmq::socket_t zap;      // bound only with a guard (inproc://zeromq.zap.01)
    zmq::socket_t monitor;  // the PULL socket's monitor: its disconnections
    zmq::socket_t socket;   // last: closed first, before the sockets it reports to
    Descriptor fd;
    Descriptor zap_fd;
    Descriptor monitor_fd;
};

// ---- Registration ---------------------------------------------------------------------------

KvReadyListener::Registration::Registration(Registration&& o) noexcept
    : owner_(std::exchange(o.owner_, nullptr)),
      id_(std::move(o.id_)),
      expected_(o.expected_),
      error_(o.error_) {}

KvReadyListener::Registration& KvReadyListener::Registration::operator=(Registration&& o) noexcept {
    if (this != &o) {
        reset();
        owner_ = std::exchange(o.owner_, nullptr);
        id_ = std::move(o.id_);
        expected_ = o.expected_;
        error_ = o.error_;
    }
    return *this;
}

void KvReadyListener::Registration::reset() {
    if (auto* k = std::exchange(owner_, nullptr)) {
        SharedLock lock;
        k->table_.release(id_, Clock::now());
        k->publish();
    }
}

std::size_t KvReadyListener::Registration::received() const {
    if (owner_ == nullptr) {
        return 0;
    }
    SharedLock lock;
    return owner_->table_.received(id_);
}

bool KvReadyListener::Registration::ready() const {
    if (owner_ == nullptr) {
        return false;
    }
    SharedLock lock;
    return owner_->table_.ready(id_);
}

awaitable<WaitEnd> KvReadyListener::Registration::wait(Clock::time_point deadline) {
    KvReadyListener* k = owner_;
    if (k == nullptr) {
        co_return WaitEnd::Stopped;
    }
    {
        SharedLock lock;
        if (k->stopped_) {
            co_return WaitEnd::Stopped;
        }
        k->table_.start_wait(id_);
        if (k->table_.ready(id_)) {
            co_return WaitEnd::Ready;
        }
    }
    const net::cancellation_state before = co_await net::this_coro::cancellation_state;
    if (before.cancelled() != net::cancellation_type::none) {
        co_return WaitEnd::Cancelled;
    }
    // Clears the table's pointer to the waker however the frame ends.
    struct Armed {
        KvReadyTable& table;
        KvReadyWaker waker;
        ~Armed() {
            SharedLock lock;
            table.set_waker(waker.id, nullptr);
        }
    };
    // The executor first: no temporaries in a co_await's full expression (GCC 12).
    const net::any_io_executor here = co_await net::this_coro::executor;
    Armed armed{k->table_, KvReadyWaker{Timer(here, deadline), id_, 0}};
    {
        SharedLock lock;
        armed.waker.serial = ++k->next_waker_serial_;
        k->table_.set_waker(id_, &armed.waker);
        // What arrived (or stopped the listener) since the check above found no waker to wake.
        if (k->table_.ready(id_)) {
            co_return WaitEnd::Ready;
        }
        if (k->stopped_) {
            co_return WaitEnd::Stopped;
        }
    }
    const auto [ec] = co_await armed.waker.timer.async_wait();
    {
        SharedLock lock;
        if (k->table_.ready(id_)) {
            co_return WaitEnd::Ready;
        }
        if (k->stopped_) {
            co_return WaitEnd::Stopped;
        }
    }
    const net::cancellation_state after = co_await net::this_coro::cancellation_state;
    if (ec && after.cancelled() != net::cancellation_type::none) {
        co_return WaitEnd::Cancelled;
    }
    co_return WaitEnd::TimedOut;
}

void KvReadyListener::wake(KvReadyWaker& w) {
    net::post(w.timer.get_executor(), [this, id = w.id, serial = w.serial] {
        SharedLock lock;
        KvReadyWaker* now = table_.waker(id);
        if (now != nullptr && now->serial == serial) {
            now->timer.cancel();
        }
    });
}

// ---- Listener -------------------------------------------------------------------------------

KvReadyListener::KvReadyListener(net::any_io_executor ex, KvReadyOptions opts,
                                 metrics::RouterMetrics& m)
    : ex_(std::move(ex)),
      opts_(std::move(opts)),
      metrics_(m),
      table_(KvReadyTable::Options{opts_.ttl, opts_.max_pending}),
      sweep_timer_(ex_),
      tasks_(ex_) {
    opts_.max_frame_bytes = std::max<std::size_t>(opts_.max_frame_bytes, 1);
    publish();
}

KvReadyListener::~KvReadyListener() {
    stop();
}

bool KvReadyListener::start(std::string& error) {
    if (started_ || stopped_) {
        error = started_ ? "kv-ready listener already started" : "kv-ready listener stopped";
        return false;
    }
    if (opts_.bind.substr(0, 6) != "tcp://") {
        error = "kv-ready bind address '" + opts_.bind + "' is not tcp://HOST:PORT";
        return false;
    }
    std::string why;
    guard_ = KvReadyGuard::load(opts_.guard, why);
    if (!guard_) {
        error = "kv-ready socket: " + why;
        return false;
    }
    std::unique_ptr<Zmq> z;
    try {
        z = std::make_unique<Zmq>(ex_);
        z->zap.set(zmq::sockopt::linger, 0);
        z->monitor.set(zmq::sockopt::linger, 0);
        z->socket.set(zmq::sockopt::linger, 0);
        if (guard_->active()) {
            // Before the PULL socket binds: no connection is judged without us.
            z->zap.bind("inproc://zeromq.zap.01");
            z->socket.set(zmq::sockopt::zap_domain, "pdrouter-kv-ready");
        }
        if (guard_->curve()) {
            z->socket.set(zmq::sockopt::curve_server, true);
            z->socket.set(zmq::sockopt::curve_secretkey, guard_->secret_key_z85());
        }
        z->socket.set(zmq::sockopt::rcvhwm, opts_.rcvhwm);
        z->socket.set(zmq::sockopt::maxmsgsize,
                      static_cast<std::int64_t>(opts_.max_frame_bytes) * kMaxMsgFactor);
        z->socket.set(zmq::sockopt::ipv6, is_ipv6_bind(opts_.bind));
        constexpr const char* kMonitor = "inproc://pdrouter-kv-ready-monitor";
        if (zmq_socket_monitor(z->socket.handle(), kMonitor, ZMQ_EVENT_DISCONNECTED) != 0) {
            throw zmq::error_t();
        }
        z->monitor.connect(kMonitor);
        z->socket.bind(opts_.bind);
        endpoint_ = z->socket.get(zmq::sockopt::last_endpoint);
        z->fd.assign(z->socket.get(zmq::sockopt::fd));
        z->monitor_fd.assign(z->monitor.get(zmq::sockopt::fd));
        if (guard_->active()) {
            z->zap_fd.assign(z->zap.get(zmq::sockopt::fd));
        }
    } catch (const zmq::error_t& e) {
        error = "kv-ready socket: cannot bind " + opts_.bind + ": " + e.what();
        return false;
    } catch (const boost::system::system_error& e) {
        error = std::string("kv-ready socket: cannot watch its descriptor: ") + e.what();
        return false;
    }
    zmq_ = std::move(z);
    started_ = true;
    std::string how;
    if (guard_->curve()) {
        how += "; CURVE on, public key " + guard_->public_key_z85();
    }
    if (!opts_.guard.allow.empty()) {
        how += "; senders allowed from";
        for (const std::string& a : opts_.guard.allow) {
            how += " " + a;
        }
    }
    PDR_INFO(kLog, "listening on " + endpoint_ + how);
    const std::string_view host = std::string_view(opts_.bind).substr(6);
    if (!guard_->active() && (host.rfind("*:", 0) == 0 || host.rfind("0.0.0.0:", 0) == 0 ||
                              host.rfind("[::]:", 0) == 0)) {
        PDR_WARN(kLog, "bound to every interface (" + opts_.bind +
                           ") with no --kv-ready-allow and no CURVE: any host that reaches this "
                           "port can send notifications; bind an internal address or set "
                           "--kv-ready-allow");
    }
    tasks_.spawn(receive_loop(Sock::Pull));
    tasks_.spawn(receive_loop(Sock::Monitor));
    if (guard_->active()) {
        tasks_.spawn(receive_loop(Sock::Zap));
    }
    tasks_.spawn(sweep_loop());
    return true;
}

void KvReadyListener::stop() {
    if (stopped_) {
        return;
    }
    stopped_ = true;
    // Closing the socket (linger 0: at once) ends the receive loop's wait, whose cancellation
    // is not the task group's to emit (see receive_loop). Then the waits and the sweep loop.
    zmq_.reset();
    for (KvReadyWaker* w : table_.wakers()) {
        wake(*w);
    }
    sweep_timer_.cancel();
    tasks_.stop();
}

KvReadyListener::Registration KvReadyListener::expect(std::string req_id, std::size_t expected) {
    SharedLock lock;
    if (stopped_) {
        return Registration(std::string_view("kv-ready listener stopped"));
    }
    const KvReadyTable::Expect r = table_.expect(req_id, expected, Clock::now());
    publish();
    if (r != KvReadyTable::Expect::Ok) {
        return Registration(refusal(r));
    }
    return Registration(this, std::move(req_id), std::max<std::size_t>(expected, 1));
}

void KvReadyListener::publish() {
    const KvReadyTable::Evictions& e = table_.evictions();
    if (e.ttl != published_.ttl) {
        metrics_.kv_ready_evicted(metrics::KvReadyEviction::Ttl,
                                  static_cast<double>(e.ttl - published_.ttl));
    }
    if (e.capacity != published_.capacity) {
        metrics_.kv_ready_evicted(metrics::KvReadyEviction::Capacity,
                                  static_cast<double>(e.capacity - published_.capacity));
    }
    published_ = e;
    metrics_.kv_ready_pending.Set(static_cast<double>(table_.size()));
}

bool KvReadyListener::is_ours(const std::string& req_id, std::string_view bytes, bool forwarded) {
    const std::string_view owner = owner_of(req_id);
    if (opts_.replica_id.empty() || owner.empty() || owner == opts_.replica_id) {
        if (forwarded) {
            metrics_.kv_ready_forward(metrics::KvReadyForward::Received);
        }
        return true;
    }
    metrics::KvReadyForward result = metrics::KvReadyForward::NotOwner;
    if (!forwarded) {
        const auto r = opts_.forwarder != nullptr ? opts_.forwarder->forward(owner, bytes)
                                                  : KvReadyForwarder::Result::UnknownOwner;
        result = r == KvReadyForwarder::Result::Sent        ? metrics::KvReadyForward::Sent
                 : r == KvReadyForwarder::Result::QueueFull ? metrics::KvReadyForward::QueueFull
                                                            : metrics::KvReadyForward::UnknownOwner;
    }
    metrics_.kv_ready_forward(result);
    if (result != metrics::KvReadyForward::Sent) {
        ++not_forwarded_since_log_;
    }
    return false;
}

void KvReadyListener::on_frame(std::string_view bytes, Clock::time_point now, bool forwarded) {
    KvReadyFrame frame = decode_kv_ready(bytes, opts_.max_frame_bytes);
    if (!frame.ok()) {
        note_malformed(*frame.malformed, now);
        return;
    }
    if (!is_ours(frame.req_id, bytes, forwarded)) {
        log_problems(now);
        return;
    }
    const KvReadyTable::Arrival a = table_.arrive(frame.req_id, now);
    metrics_.kv_ready_notification(outcome_of(a.outcome));
    if (a.wake != nullptr) {
        wake(*a.wake);
    }
    if (a.outcome == KvReadyTable::Outcome::Unknown) {
        ++unknown_since_log_;
        log_problems(now);
    }
}

void KvReadyListener::note_malformed(metrics::KvReadyMalformed reason, Clock::time_point now) {
    metrics_.kv_ready_malformed(reason);
    ++malformed_since_log_[static_cast<std::size_t>(reason)];
    log_problems(now);
}

void KvReadyListener::log_problems(Clock::time_point now) {
    if (last_log_ != Clock::time_point{} && now - last_log_ < kLogInterval) {
        return;
    }
    std::string text;
    for (std::size_t r = 0; r < malformed_since_log_.size(); ++r) {
        if (malformed_since_log_[r] != 0) {
            text += (text.empty() ? "" : ", ") +
                    std::string(to_string(static_cast<metrics::KvReadyMalformed>(r))) + " " +
                    std::to_string(malformed_since_log_[r]);
        }
    }
    if (text.empty() && unknown_since_log_ == 0 && not_forwarded_since_log_ == 0 &&
        refused_since_log_ == 0) {
        return;
    }
    std::string line = text.empty() ? "no malformed messages" : "malformed messages (" + text + ")";
    line += ", " + std::to_string(unknown_since_log_) + " notification(s) for unknown req_ids";
    if (not_forwarded_since_log_ != 0) {
        line += ", " + std::to_string(not_forwarded_since_log_) +
                " for another replica's req_ids dropped (no such peer, its queue full, or "
                "forwarded here by mistake: pdrouter_kv_ready_forwarded_total)";
    }
    if (refused_since_log_ != 0) {
        line += ", " + std::to_string(refused_since_log_) +
                " connection(s) refused (the last: " + last_refused_ + ")";
    }
    line += " since the previous warning (one per " + std::to_string(kLogInterval.count() / 1000) +
            " s at most)";
    PDR_WARN(kLog, line);
    malformed_since_log_ = {};
    unknown_since_log_ = 0;
    not_forwarded_since_log_ = 0;
    refused_since_log_ = 0;
    last_log_ = now;
}

void KvReadyListener::drain_pull(Clock::time_point now, std::size_t& taken) {
    zmq::socket_t& sock = zmq_->socket;
    zmq::message_t msg;
    while (taken < kBatch && sock.recv(msg, zmq::recv_flags::dontwait)) {
        ++taken;
        if (!msg.more()) {
            on_frame(msg.to_string_view(), now, false);
            continue;
        }
        // [kForwardedMark, frame] from a peer replica; any other multipart is refused.
        const bool marked = msg.to_string_view() == kForwardedMark;
        std::size_t parts = 1;
        while (msg.more() && sock.recv(msg, zmq::recv_flags::dontwait)) {
            ++parts;
            if (parts == 2 && marked && !msg.more()) {
                on_frame(msg.to_string_view(), now, true);
            }
        }
        if (!marked || parts != 2) {
            note_malformed(metrics::KvReadyMalformed::Multipart, now);
        }
    }
}

// One ZAP request (RFC 27: version, request id, domain, address, routing id, mechanism,
// credentials...), one reply (version, request id, status code, status text, user id,
// metadata).
void KvReadyListener::drain_zap(std::size_t& taken) {
    zmq::socket_t& sock = zmq_->zap;
    zmq::message_t msg;
    while (taken < kBatch && sock.recv(msg, zmq::recv_flags::dontwait)) {
        ++taken;
        std::vector<std::string> frames{msg.to_string()};
        while (msg.more() && frames.size() < 16 && sock.recv(msg, zmq::recv_flags::none)) {
            frames.push_back(msg.to_string());
        }
        while (msg.more() && sock.recv(msg, zmq::recv_flags::none)) {
        }
        frames.resize(std::max<std::size_t>(frames.size(), 7));
        const std::string& address = frames[3];
        const KvReadyGuard::Verdict v = guard_->judge(address, frames[5], frames[6]);
        const bool ok = v == KvReadyGuard::Verdict::Allowed;
        if (!ok) {
            metrics_.kv_ready_refused(v == KvReadyGuard::Verdict::Address
                                          ? metrics::KvReadyRefused::Address
                                          : metrics::KvReadyRefused::Key);
            ++refused_since_log_;
            last_refused_ = address.substr(0, 64) + (v == KvReadyGuard::Verdict::Address
                                                         ? ", not in --kv-ready-allow"
                                                         : ", CURVE key not allowed");
        }
        sock.send(zmq::str_buffer("1.0"), zmq::send_flags::sndmore);
        sock.send(zmq::buffer(frames[1]), zmq::send_flags::sndmore);
        sock.send(zmq::buffer(std::string_view(ok ? "200" : "400")), zmq::send_flags::sndmore);
        sock.send(zmq::buffer(std::string_view(ok ? "OK" : "refused")), zmq::send_flags::sndmore);
        sock.send(zmq::str_buffer(""), zmq::send_flags::sndmore);
        sock.send(zmq::str_buffer(""), zmq::send_flags::none);
        if (!ok) {
            log_problems(Clock::now());
        }
    }
}

// Monitor events: [6 bytes: event (2) and value (4)][endpoint].
void KvReadyListener::drain_monitor(std::size_t& taken) {
    zmq::socket_t& sock = zmq_->monitor;
    zmq::message_t msg;
    while (taken < kBatch && sock.recv(msg, zmq::recv_flags::dontwait)) {
        ++taken;
        std::uint16_t event = 0;
        if (msg.size() >= sizeof event) {
            std::memcpy(&event, msg.data(), sizeof event);
        }
        while (msg.more() && sock.recv(msg, zmq::recv_flags::none)) {
        }
        if (event == ZMQ_EVENT_DISCONNECTED) {
            metrics_.kv_ready_disconnects.Increment();
        }
    }
}

KvReadyListener::Drain KvReadyListener::drain(Sock which) {
    zmq::socket_t& sock = zmq_->sock(which);
    const Clock::time_point now = Clock::now();
    std::size_t taken = 0;
    try {
        for (;;) {
            // Until EAGAIN, then ZMQ_EVENTS: reading it processes libzmq's pending commands and
            // re-arms the edge-triggered ZMQ_FD; POLLIN there means more arrived meanwhile.
            switch (which) {
                case Sock::Pull:
                    drain_pull(now, taken);
                    break;
                case Sock::Zap:
                    drain_zap(taken);
                    break;
                case Sock::Monitor:
                    drain_monitor(taken);
                    break;
            }
            const bool readable = (sock.get(zmq::sockopt::events) & ZMQ_POLLIN) != 0;
            if (!readable) {
                publish();
                return Drain::Empty;
            }
            if (taken >= kBatch) {
                publish();
                return Drain::More;
            }
        }
    } catch (const zmq::error_t& e) {
        publish();
        if (e.num() == EINTR) {
            return Drain::More;
        }
        PDR_ERROR(kLog, std::string("receiving stopped: ") + e.what());
        return Drain::Failed;
    }
}

awaitable<void> KvReadyListener::receive_loop(Sock which) {
    const TaskGroup::Alive alive = tasks_.alive();
    while (!stopped_) {
        const Drain d = drain(which);
        if (d == Drain::Failed) {
            co_return;
        }
        if (d == Drain::More) {
            co_await net::post(ex_, net::use_awaitable);  // a burst: let others run first
        } else {
            // No cancellation slot: the wait's cancellation handler would point into the
            // descriptor, which stop() destroys before the task group's cancellation is
            // delivered; destroying it (release()) ends the wait with operation_aborted.
            const auto [ec] = co_await zmq_->desc(which).async_wait(
                net::posix::descriptor_base::wait_read,
                net::bind_cancellation_slot(net::cancellation_slot(), use_tuple));
            if (alive && !stopped_ && ec) {
                PDR_ERROR(kLog, "waiting on the socket failed: " + ec.message());
                co_return;
            }
        }
        if (!alive) {
            co_return;
        }
    }
}

awaitable<void> KvReadyListener::sweep_loop() {
    const TaskGroup::Alive alive = tasks_.alive();
    const Duration tick = std::max<Duration>(opts_.ttl / 4, Duration{1});
    while (!stopped_) {
        sweep_timer_.expires_after(tick);
        co_await sweep_timer_.async_wait();
        if (!alive || stopped_) {
            co_return;
        }
        const Clock::time_point now = Clock::now();
        table_.sweep(now);
        publish();
        log_problems(now);
    }
}

}  // namespace pdr::kv
