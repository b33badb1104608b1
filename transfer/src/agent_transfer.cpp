// Agent: transfers, notifications, backend events, deadlines, heartbeats and progress. Long
// (~640 lines) and kept as one: every part works on the same per-transfer state (Xfer) under
// the agent's lock; peers and their liveness are in agent_peers.cpp.
#include <poll.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <algorithm>

#include "agent_impl.hpp"

namespace pdx {
void Agent::Impl::split_large(std::vector<detail::Segment>& segs) {
    constexpr std::uint64_t kMax = kChunkBytes;
    bool any = false;
    for (const auto& s : segs) {
        any = any || s.bytes > kMax;
    }
    if (!any) {
        return;
    }
    std::vector<detail::Segment> out;
    for (const auto& s : segs) {
        for (std::uint64_t off = 0; off < s.bytes; off += kMax) {
            out.push_back({s.local_addr + off, s.remote_addr + off, std::min(kMax, s.bytes - off)});
        }
    }
    segs = std::move(out);
}

// ---- peers -------------------------------------------------------------------------------

Result<Agent::Impl::Peer*> Agent::Impl::live_peer(PeerHandle h) {
    Peer* pp = h == last_peer_handle_ ? last_peer_ : nullptr;
    if (!pp) {
        auto it = peers_.find(h);
        if (it == peers_.end()) {
            return {Status::NotFound, "unknown peer handle " + std::to_string(h)};
        }
        pp = &it->second;
        last_peer_handle_ = h;
        last_peer_ = pp;
    }
    Peer& p = *pp;
    if (p.state == PeerState::Replaced) {
        return {Status::NotFound, "stale peer handle " + std::to_string(h) + " ('" + p.name +
                                      "' generation " + std::to_string(p.generation) +
                                      "): " + p.gone_reason};
    }
    if (p.state == PeerState::Gone) {
        return {Status::PeerGone, "peer '" + p.name + "' gone: " + p.gone_reason};
    }
    if (p.ended) {  // seen ended since the last tick: declared gone by the next one
        return {Status::PeerGone,
                "peer '" + p.name + "' gone: process " + p.process.what() + " exited"};
    }
    return &p;
}

void Agent::Impl::peer_gone(Peer& p, PeerState state, PeerGoneReason why,
                            const std::string& reason) {
    if (p.state != PeerState::Alive) {
        if (state == PeerState::Replaced) {
            p.state = state;
        }
        return;
    }
    p.state = state;
    p.gone_reason = reason;
    p.gone_at = Clock::now();
    --stats_.peers;
    ++stats_.peers_gone;
    watch_process(p, false);
    auto in_flight = std::move(p.in_flight);
    p.in_flight.clear();
    for (TransferHandle h : in_flight) {
        auto it = xfers_.find(h);
        if (it != xfers_.end()) {
            finish(h, it->second, Status::PeerGone, reason);
        }
    }
    if (p.conn) {
        // A peer that may still run (timeout, removed, replaced) is closed gracefully: its
        // posted operations may still complete, and keep their region pinned until then.
        const bool dead = why == PeerGoneReason::Exited || why == PeerGoneReason::ConnectionError;
        const bool settled = backend_->disconnect(
            p.conn, dead ? detail::Backend::Close::Abort : detail::Backend::Close::Graceful);
        for (auto it = xfers_.begin(); settled && it != xfers_.end();) {
            // the backend never touches these operations' memory again
            if (it->second.conn == p.conn && it->second.backend_pending) {
                drop_backend_op(it->second);
                it = xfers_.erase(it);
            } else {
                ++it;
            }
        }
        by_conn_.erase(p.conn);
        p.conn = 0;
    }
    if (by_instance_.count(p.instance) && by_instance_[p.instance] == p.handle) {
        by_instance_.erase(p.instance);
    }
    if (peer_handler_) {
        peer_events_.push_back({p.handle, p.name, p.instance, p.generation, why, reason});
    }
}

bool Agent::Impl::process_ended(Peer& p) {
    if (p.ended) {
        return true;
    }
    if (p.process.state() == detail::ProcessWatch::State::Running && p.process.ended()) {
        p.ended = true;
        next_tick_ = {};  // declared gone by the next progress()
    }
    return p.ended;
}

void Agent::Impl::watch_process(Peer& p, bool on) {
    if (p.process.fd() < 0) {
        return;
    }
    if (on) {
        epoll_event ev{};
        ev.events = EPOLLIN;
        ev.data.fd = p.process.fd();
        ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, p.process.fd(), &ev);
    } else {
        ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, p.process.fd(), nullptr);
        p.process.close();
    }
}

// ---- transfers ---------------------------------------------------------------------------

Result<TransferHandle> Agent::Impl::post(const TransferRequest& req, Direction dir) {
    if (!req.groups.empty()) {
        return post_batch(req, dir);
    }
    // Clocks are read only for the latency stats (cheap ticks, see latency_clock.hpp) and for
    // a default deadline.
    const bool timed = cfg_.latency_stats;
    const std::uint64_t t0 = timed ? latency_clock_.now() : 0;
    const bool default_deadline = req.deadline == Clock::time_point{};
    std::unique_lock lk(mu_);
    auto refuse = [&](Status s, std::string m) -> Result<TransferHandle> {
        ++stats_.transfers_refused;
        return {s, std::move(m)};
    };
    auto pr = live_peer(req.peer);
    if (!pr) {
        return refuse(pr.status(), pr.message());
    }
    Peer& peer = **pr;
    if (req.local_layout >= layouts_.size()) {
        return refuse(Status::Invalid, "unknown local layout " + std::to_string(req.local_layout));
    }
    if (req.remote_layout >= peer.desc.layouts.size()) {
        return refuse(Status::Invalid,
                      "unknown remote layout " + std::to_string(req.remote_layout));
    }
    const Layout& ll = layouts_[req.local_layout];
    const Layout& rl = peer.desc.layouts[req.remote_layout];
    Region& region = regions_[ll.region];
    if (!region.live) {
        return refuse(Status::Invalid, "local layout's region was released");
    }
    const auto& rr = peer.desc.regions[rl.region];
    if (rr.size == 0) {
        return refuse(Status::Invalid, "remote layout's region was released");
    }
    if (req.notify && req.notify->payload.size() > kMaxNotifyPayload) {
        return refuse(Status::Invalid, "notification payload too large");
    }
    if (req.notify && !known_kind(req.notify->kind)) {
        return refuse(Status::Invalid, "unknown notification kind");
    }
    detail::PlanSide ls{ll, reinterpret_cast<std::uint64_t>(region.mem.base)};
    detail::PlanSide rs{rl, rr.base};
    // plan_ (guarded by mu_) keeps its segment capacity between posts: no allocation here.
    detail::Plan* plan = &plan_;
    auto planned =
        detail::make_plan(ls, rs, req.local_ids, req.remote_ids, dir == Direction::Write,
                          {cfg_.max_transfer_bytes, cfg_.max_blocks_per_transfer}, plan_);
    if (!planned) {
        return refuse(planned.status(), planned.message());
    }

    if (req.deadline == kExpiredDeadline) {
        return expire_at_once(req, dir, peer, plan->bytes,
                              static_cast<std::uint32_t>(plan->segments.size()));
    }
    TransferHandle h = ++next_xfer_;
    const std::uint64_t inline_bytes =
        peer.peer_error_mode ? cfg_.inline_post_bytes_peer_mode : cfg_.inline_post_bytes;
    const bool inline_post = post_queue_.empty() && plan->segments.size() <= cfg_.inline_post_ops &&
                             plan->bytes <= inline_bytes;
    bool done_inline = false;
    if (inline_post) {
        auto st =
            backend_->post(peer.conn, dir, region.mem, rl.region, plan->segments, h, &done_inline);
        if (!st) {
            return refuse(st.status(), st.message());
        }
    }
    const auto descriptors = static_cast<std::uint32_t>(plan->segments.size());
    ++stats_.transfers_posted;
    stats_.blocks_requested += req.local_ids.size();
    stats_.descriptors_posted += descriptors;
    if (timed) {
        now_ = latency_clock_.now();  // one read for the post latency and an inline completion
    }
    bool pending = false;
    if (done_inline) {
        // e.g. shm: the data and its flush completed inside the backend's post(). The transfer
        // ends here and never gets a record in xfers_ (nor its deadline, never needed).
        TransferResult res =
            new_result(h, req, peer.handle, dir, plan->bytes, descriptors, Status::Ok);
        if (plan->bytes >= kLivenessCheckBytes && !peer.peer_error_mode && process_ended(peer)) {
            res.status = Status::PeerGone;  // copied into a segment nobody reads any more
            res.message = "peer process " + peer.process.what() + " exited";
        }
        count_terminal(res, t0);
        if (req.notify && dir == Direction::Write && res.status == Status::Ok) {
            send_done_locked(peer, *req.notify, res);
        }
        record_terminal(h, res, req.on_complete);
    } else {
        ++stats_.transfers_in_flight;
        Xfer x;
        x.res = new_result(h, req, peer.handle, dir, plan->bytes, descriptors, Status::InProgress);
        x.posted = t0;
        x.deadline = default_deadline ? deadline_after(cfg_.default_deadline) : req.deadline;
        x.region = ll.region;
        x.conn = peer.conn;
        x.remote_region = rl.region;
        x.ops = inline_post ? 1 : 0;
        if (!inline_post) {
            x.queued = std::move(plan->segments);
            split_large(x.queued);  // bounds the lock hold time of one chunk
            post_queue_.push_back(h);
        }
        x.notify = req.notify;
        x.on_complete = req.on_complete;
        if (inline_post) {
            // The backend may have completed (or failed) it inside post() all the same and
            // queued that: delivered now, it ends here without entering xfers_ (on_op_complete)
            inline_op_ = h;
            inline_xfer_ = &x;
            inline_peer_ = &peer;  // finish() needs it: spares a second peers_ lookup
            backend_->deliver_completed();
            inline_xfer_ = nullptr;
            inline_peer_ = nullptr;
        }
        pending = x.backend_pending;
        if (pending) {
            ++region.ops;
            peer.in_flight.insert(h);
            xfers_.emplace(h, std::move(x));
        }
    }
    if (timed) {
        post_ticks_.add(detail::LatencyClock::between(t0, now_));
        now_ = 0;
    }
    // Wake the progress context only if it has something to do and may be asleep: the
    // progress thread is in epoll_wait, or (EventFd mode) a caller armed to wait on the fd.
    // A caller that drives progress() without arm() (busy polling) gets no wake-up syscalls.
    const bool wake_up = sleeping_ && (pending || needs_progress_locked());
    if (wake_up) {
        sleeping_ = false;
    }
    lk.unlock();
    if (wake_up) {
        wake();
    }
    return h;
}

void Agent::Impl::drop_backend_op(Xfer& x) {
    if (!x.backend_pending) {
        return;
    }
    x.backend_pending = false;
    auto unpin = [&](RegionId r) {
        if (r < regions_.size() && regions_[r].ops > 0) {
            --regions_[r].ops;
        }
    };
    if (x.pinned.empty()) {
        unpin(x.region);
    }
    for (RegionId r : x.pinned) {
        unpin(r);
    }
}

void Agent::Impl::finish(TransferHandle h, Xfer& x, Status s, std::string message) {
    if (is_terminal(x.res.status)) {
        return;
    }
    Peer* peer = inline_xfer_ == &x ? inline_peer_ : nullptr;
    if (!peer) {
        auto pit = peers_.find(x.res.peer);
        peer = pit == peers_.end() ? nullptr : &pit->second;
    }
    // Ok to a same-host peer whose process ended: the data went into a segment nobody reads.
    // (Peer error mode means no shm lanes: there an Ok was acknowledged by the target itself.)
    if (s == Status::Ok && peer && !peer->peer_error_mode &&
        (inline_xfer_ != &x || x.res.bytes >= kLivenessCheckBytes) && process_ended(*peer)) {
        s = Status::PeerGone;
        message = "peer process " + peer->process.what() + " exited";
    }
    x.res.status = s;
    x.res.message = std::move(message);
    --stats_.transfers_in_flight;
    count_terminal(x.res, x.posted);
    if (peer) {
        if (!peer->in_flight.empty()) {
            peer->in_flight.erase(h);
        }
        if (x.notify && x.res.direction == Direction::Write && peer->state == PeerState::Alive) {
            if (s == Status::Ok) {
                send_done_locked(*peer, *x.notify, x.res);
            } else if (x.ops > 0) {
                x.failed_note_due = true;  // posted chunks may still land: settle() sends it
            } else {
                send_failed_locked(*peer, x);
            }
        }
    }
    record_terminal(h, x.res, std::move(x.on_complete));
    x.on_complete = nullptr;
}

void Agent::Impl::count_terminal(const TransferResult& res, std::uint64_t posted) {
    switch (res.status) {
        case Status::Ok:
            (res.direction == Direction::Write ? stats_.bytes_written : stats_.bytes_read) +=
                res.bytes;
            ++stats_.transfers_ok;
            if (cfg_.latency_stats) {
                completion_ticks_.add(
                    detail::LatencyClock::between(posted, now_ != 0 ? now_ : latency_clock_.now()));
            }
            break;
        case Status::Expired:
            ++stats_.transfers_expired;
            break;
        case Status::Canceled:
            ++stats_.transfers_canceled;
            break;
        case Status::PeerGone:
            ++stats_.transfers_peer_gone;
            break;
        default:
            ++stats_.transfers_failed;
            break;
    }
}

void Agent::Impl::send_done_locked(Peer& p, const Notification& n, TransferResult& res) {
    if (p.state != PeerState::Alive) {
        return;
    }
    if (auto sent = send_locked(p, n, 0); !sent) {
        res.message = "data written; notification not sent: " + sent.message();
    }
}

void Agent::Impl::record_terminal(TransferHandle h, const TransferResult& res,
                                  CompletionFn on_complete) {
    const TransferHandle gone = history_.add(h, res);
    if (gone != kNoTransfer) {
        auto& slot = done_slots_[gone & done_mask_];
        if (slot.load(std::memory_order_relaxed) >> 8 == gone) {
            slot.store(0, std::memory_order_release);
        }
    }
    if (h < (std::uint64_t{1} << 56)) {
        done_slots_[h & done_mask_].store((h << 8) | static_cast<std::uint8_t>(res.status),
                                          std::memory_order_release);
    }
    if (on_complete) {
        callbacks_.emplace_back(std::move(on_complete), res);
    }
    if (waiters_ > 0) {
        cv_.notify_all();
    }
}

void Agent::Impl::send_failed_locked(Peer& p, const Xfer& x) {
    Notification f;
    f.kind = NotifyKind::Failed;
    f.transfer_id = x.notify->transfer_id;
    f.sequence = x.notify->sequence;
    f.expected = x.notify->expected;
    f.status = x.res.status;
    send_locked(p, f, 0);
}

Result<void> Agent::Impl::send_locked(Peer& p, const Notification& n, std::uint8_t flags) {
    auto r = backend_->send(p.conn, detail::encode_notification(n, flags, instance_));
    if (!(flags & detail::kNotifyFlagInternal)) {
        ++(r ? stats_.notifications_sent : stats_.notifications_failed);
    }
    return r;
}

void Agent::Impl::on_op_complete(std::uint64_t op, Status status, std::string message) {
    if (inline_xfer_ && op == inline_op_) {  // completed inside post(): not in xfers_ (yet)
        Xfer& x = *inline_xfer_;
        x.ops = 0;
        x.backend_pending = false;  // post() never pinned the region for it
        finish(op, x, status, std::move(message));
        return;
    }
    auto it = xfers_.find(op);
    if (it == xfers_.end()) {
        return;
    }
    Xfer& x = it->second;
    if (x.ops > 0) {
        --x.ops;
    }
    if (status != Status::Ok && x.op_status == Status::Ok) {
        x.op_status = status;
        x.op_message = std::move(message);
    }
    if (x.op_status != Status::Ok) {
        finish(op, x, x.op_status, x.op_message);  // report now; forgotten in settle()
    }
    settle(it);
}

void Agent::Impl::on_message(std::span<const std::byte> message) {
    auto d = detail::decode_notification(message);
    if (!d) {
        return;  // malformed: dropped
    }
    ReceivedNotification rn;
    rn.sender_instance = d->header.sender;
    auto pi = by_instance_.find(d->header.sender);
    if (pi != by_instance_.end()) {
        Peer& p = peers_.at(pi->second);
        p.heard = true;
        p.last_heard = Clock::now();
        rn.peer = p.handle;
        rn.peer_name = p.name;
        // The sender had declared us gone, closed its side and connected again: ours to it is
        // stale if it was made before that close. A stale one was made at least the sender's
        // peer_timeout before it (the sender heard its first heartbeat, then nothing for that
        // long); one made after the close is fine. Half that timeout is the margin for the
        // note's time in transit.
        if ((d->header.flags & detail::kNotifyFlagReconnect) && p.state == PeerState::Alive) {
            const auto closed_ago = std::chrono::milliseconds(
                std::min<std::uint64_t>(d->header.transfer_id, std::uint64_t(1) << 40));
            const auto margin = std::chrono::milliseconds(d->header.sequence / 2);
            if (p.last_heard - p.connected_at > closed_ago + margin &&
                std::find(reconnect_.begin(), reconnect_.end(), p.handle) == reconnect_.end()) {
                reconnect_.push_back(p.handle);
            }
        }
    }
    if (d->header.flags & detail::kNotifyFlagInternal) {
        return;
    }
    ++stats_.notifications_received;
    rn.notification = std::move(d->notification);
    received_.push_back(std::move(rn));
}

void Agent::Impl::on_conn_error(std::uint64_t conn, std::string message) {
    auto it = by_conn_.find(conn);
    if (it == by_conn_.end()) {
        return;
    }
    auto p = peers_.find(it->second);
    if (p != peers_.end()) {
        // the connection failed: nothing more can come over it, so it is torn down at once
        peer_gone(p->second, PeerState::Gone, PeerGoneReason::ConnectionError,
                  "endpoint error: " + message);
    }
}

// ---- Agent façade: transfers, notifications, progress ------------------------------------

Result<TransferHandle> Agent::write_blocks(const TransferRequest& r) {
    return impl_->post(r, Direction::Write);
}

Result<TransferHandle> Agent::read_blocks(const TransferRequest& r) {
    if (r.notify) {
        return {Status::Invalid, "read_blocks: notifications ride on writes only"};
    }
    return impl_->post(r, Direction::Read);
}

Status Agent::poll(TransferHandle handle) const {
    // A finished transfer answers without the lock (see done_slots_); terminal is final.
    const std::uint64_t slot =
        impl_->done_slots_[handle & impl_->done_mask_].load(std::memory_order_acquire);
    if (handle != kNoTransfer && slot >> 8 == handle) {
        return static_cast<Status>(slot & 0xff);
    }
    std::lock_guard lk(impl_->mu_);
    if (const TransferResult* done = impl_->history_.find(handle)) {
        return done->status;
    }
    auto it = impl_->xfers_.find(handle);
    return it != impl_->xfers_.end() ? it->second.res.status : Status::NotFound;
}

Result<TransferResult> Agent::result(TransferHandle handle) const {
    std::lock_guard lk(impl_->mu_);
    auto it = impl_->xfers_.find(handle);
    if (it != impl_->xfers_.end()) {
        return it->second.res;
    }
    const TransferResult* done = impl_->history_.find(handle);
    if (!done) {
        return {Status::NotFound, "unknown transfer handle"};
    }
    return *done;
}

Result<void> Agent::cancel(TransferHandle handle) {
    {
        std::lock_guard lk(impl_->mu_);
        auto it = impl_->xfers_.find(handle);
        const TransferResult* done = it == impl_->xfers_.end() ? impl_->history_.find(handle)
                                     : is_terminal(it->second.res.status) ? &it->second.res
                                                                          : nullptr;
        if (done) {
            return {Status::Invalid, "cancel: transfer " + std::to_string(handle) +
                                         " already ended: " + to_string(done->status)};
        }
        if (it == impl_->xfers_.end()) {
            return {Status::NotFound, "unknown transfer handle"};
        }
        impl_->finish(handle, it->second, Status::Canceled, "canceled by caller");
    }
    impl_->wake();
    return {};
}

Result<std::size_t> Agent::cancel_transfer_id(std::uint64_t transfer_id) {
    std::size_t n = 0;
    {
        std::lock_guard lk(impl_->mu_);
        for (auto& [h, x] : impl_->xfers_) {
            if (x.res.transfer_id == transfer_id && !is_terminal(x.res.status)) {
                impl_->finish(h, x, Status::Canceled, "canceled by caller (transfer id)");
                ++n;
            }
        }
    }
    if (n == 0) {
        return {Status::NotFound, "no transfer in flight with id " + std::to_string(transfer_id)};
    }
    impl_->wake();
    return n;
}

Status Agent::wait(TransferHandle handle, std::chrono::milliseconds timeout) {
    if (impl_->cfg_.progress == ProgressMode::Thread) {
        std::unique_lock lk(impl_->mu_);
        Status s = Status::NotFound;
        auto done = [&] {
            auto it = impl_->xfers_.find(handle);
            if (it != impl_->xfers_.end()) {
                s = it->second.res.status;
            } else if (const TransferResult* kept = impl_->history_.find(handle)) {
                s = kept->status;
            } else {
                s = Status::NotFound;
            }
            return s != Status::InProgress;
        };
        if (done()) {  // often already terminal (completed inside write_blocks)
            return s;
        }
        ++impl_->waiters_;
        impl_->cv_.wait_until(lk, deadline_after(timeout), done);
        --impl_->waiters_;
        return s;
    }
    const auto until = deadline_after(timeout);
    for (;;) {
        Status s = poll(handle);  // often already terminal (completed inside write_blocks)
        if (s != Status::InProgress) {
            return s;
        }
        progress();
        s = poll(handle);
        if (s != Status::InProgress || Clock::now() >= until) {
            return s;
        }
        if (arm()) {
            pollfd p{event_fd(), POLLIN, 0};
            ::poll(&p, 1, static_cast<int>(Impl::kTick.count()));
        }
    }
}

Result<void> Agent::notify(PeerHandle peer, const Notification& n) {
    if (n.payload.size() > kMaxNotifyPayload) {
        return {Status::Invalid, "notification payload too large"};
    }
    if (!Impl::known_kind(n.kind)) {
        return {Status::Invalid, "unknown notification kind"};
    }
    {
        std::lock_guard lk(impl_->mu_);
        auto p = impl_->live_peer(peer);
        if (!p) {
            return {p.status(), p.message()};
        }
        auto r = impl_->send_locked(**p, n, 0);
        if (!r) {
            return r;
        }
    }
    impl_->wake();
    return {};
}

void Agent::set_notification_handler(NotificationFn handler) {
    std::lock_guard lk(impl_->mu_);
    impl_->notification_handler_ = std::move(handler);
}

std::vector<ReceivedNotification> Agent::drain_notifications() {
    // Never waits for mu_: what the progress loop received and has not moved here yet (it
    // does at the end of every progress round) comes along only if mu_ is free right now.
    std::lock_guard nl(impl_->notes_mu_);
    auto out = std::move(impl_->undrained_);
    impl_->undrained_.clear();
    std::unique_lock lk(impl_->mu_, std::try_to_lock);
    if (lk.owns_lock() && !impl_->notification_handler_) {
        for (auto& r : impl_->received_) {
            out.push_back(std::move(r));
        }
        impl_->received_.clear();
    }
    return out;
}

int Agent::event_fd() const {
    return impl_->cfg_.progress == ProgressMode::EventFd ? impl_->epoll_fd_ : -1;
}
std::size_t Agent::progress() {
    return impl_->progress();
}
bool Agent::arm() {
    return impl_->arm();
}

}  // namespace pdx
