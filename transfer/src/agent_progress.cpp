// Agent: queued posts, deadlines, heartbeats, lease sweeps, callbacks and the progress loop.
#include <sys/epoll.h>
#include <unistd.h>

#include <algorithm>

#include "agent_impl.hpp"

namespace pdx {

// ---- queued posts --------------------------------------------------------------------------

bool Agent::Impl::needs_progress_locked() const {
    return !post_queue_.empty() || !callbacks_.empty() || !received_.empty() ||
           !peer_events_.empty() || backend_->busy();
}

bool Agent::Impl::pump_locked() {
    while (!post_queue_.empty()) {
        TransferHandle h = post_queue_.front();
        auto it = xfers_.find(h);
        if (it == xfers_.end()) {  // dropped with its peer
            post_queue_.pop_front();
            continue;
        }
        Xfer& x = it->second;
        if (!is_terminal(x.res.status) && Clock::now() >= x.deadline) {
            finish(h, x, Status::Expired, "deadline passed");  // post nothing for it
        }
        if (x.next >= x.queued.size() && !x.later.empty()) {  // a batch's next part
            Part& part = x.later.front();
            x.region = part.region;
            x.remote_region = part.remote_region;
            x.queued = std::move(part.segments);
            x.next = 0;
            x.later.erase(x.later.begin());
        }
        if (is_terminal(x.res.status) || x.op_status != Status::Ok || x.next >= x.queued.size()) {
            post_queue_.pop_front();  // canceled/expired/failed: post nothing more
            x.queued = {};
            x.later = {};
            x.next = 0;
            settle(it);
            continue;
        }
        std::size_t n = 0;
        std::uint64_t bytes = 0;
        while (x.next + n < x.queued.size() && n < kChunkSegments &&
               (n == 0 || bytes + x.queued[x.next + n].bytes <= kChunkBytes)) {
            bytes += x.queued[x.next + n++].bytes;
        }
        std::span<const detail::Segment> chunk(x.queued.data() + x.next, n);
        auto st = backend_->post(x.conn, x.res.direction, regions_[x.region].mem, x.remote_region,
                                 chunk, h, nullptr);
        x.next += n;
        if (st) {
            ++x.ops;
        } else {
            // The transfer ends with the refusal now, even if earlier chunks are pending; a
            // status that is not terminal (Invalid: e.g. the peer released the region since
            // the plan was made) ends it as Failed, so nothing later finishes it again.
            x.op_status = is_terminal(st.status()) && st.status() != Status::Ok ? st.status()
                                                                                : Status::Failed;
            x.op_message = st.message();
            finish(h, x, x.op_status, x.op_message);
        }
        if ((x.next >= x.queued.size() && x.later.empty()) || !st) {
            post_queue_.pop_front();
            x.queued = {};
            x.later = {};
            x.next = 0;
            settle(it);
        }
        return !post_queue_.empty();
    }
    return false;
}

void Agent::Impl::settle(std::unordered_map<TransferHandle, Xfer>::iterator it) {
    Xfer& x = it->second;
    if (x.ops > 0 || x.next < x.queued.size() || !x.later.empty()) {
        return;
    }
    drop_backend_op(x);
    finish(it->first, x, x.op_status, std::move(x.op_message));
    if (x.failed_note_due) {  // every posted chunk has completed: nothing more can land
        auto pit = peers_.find(x.res.peer);
        if (pit != peers_.end() && pit->second.state == PeerState::Alive) {
            send_failed_locked(pit->second, x);
        }
    }
    xfers_.erase(it);
}

// ---- progress ----------------------------------------------------------------------------

void Agent::Impl::reconnect_pending_locked() {
    auto pending = std::move(reconnect_);
    reconnect_.clear();
    for (PeerHandle h : pending) {
        auto it = peers_.find(h);
        if (it == peers_.end() || it->second.state != PeerState::Alive) {
            continue;
        }
        Peer& p = it->second;
        detail::Descriptor desc = p.desc;
        const std::string name = p.name;
        peer_gone(p, PeerState::Replaced, PeerGoneReason::Replaced,
                  "connected again: '" + name +
                      "' had declared this agent gone and closed its side of the connection");
        if (!name.empty() && by_name_.count(name) && by_name_[name] == h) {
            by_name_.erase(name);  // the new connection is the same instance, not a successor
        }
        // The same instance again: a new handle (named: the next generation), its descriptor
        // as last added; its notes are attributed to the new handle from now on.
        (void)add_peer_locked(std::move(desc), false);
    }
}

void Agent::Impl::tick_locked(Clock::time_point now) {
    for (auto& [h, x] : xfers_) {
        if (!is_terminal(x.res.status) && now >= x.deadline) {
            finish(h, x, Status::Expired, "deadline passed");
        }
    }
    for (auto it = xfers_.begin(); it != xfers_.end();) {
        it = (is_terminal(it->second.res.status) && !it->second.backend_pending) ? xfers_.erase(it)
                                                                                 : std::next(it);
    }
    bool beat = now >= next_heartbeat_;
    if (beat) {
        next_heartbeat_ = deadline_after(cfg_.heartbeat_interval, now);
    }
    for (auto& [h, p] : peers_) {
        if (p.state != PeerState::Alive) {
            continue;
        }
        if (process_ended(p)) {
            peer_gone(p, PeerState::Gone, PeerGoneReason::Exited,
                      "process " + p.process.what() + " exited");
            continue;
        }
        // From add_peer on, whether or not it was ever heard: a peer that dies before it
        // added us (and so before its first heartbeat) is declared gone all the same.
        if (now - p.last_heard > cfg_.peer_timeout) {
            const auto ms =
                std::chrono::duration_cast<std::chrono::milliseconds>(now - p.last_heard).count();
            peer_gone(p, PeerState::Gone, PeerGoneReason::Timeout,
                      p.heard ? "no heartbeat for " + std::to_string(ms) + " ms"
                              : "not heard from since add_peer " + std::to_string(ms) +
                                    " ms ago (it must add this agent within peer_timeout)");
            continue;
        }
        if (beat) {
            Notification hb;
            hb.kind = NotifyKind::Heartbeat;
            send_locked(p, hb, detail::kNotifyFlagInternal);
        }
    }
    // Every id expired here is kept for the next expire_leases() (none dropped: the app must
    // learn that those blocks are free). 8 bytes per id until the app collects them.
    auto expired = leases_.expire(now);
    if (!expired.empty()) {
        stats_.leases_expired += expired.size();
        expired_leases_.insert(expired_leases_.end(), expired.begin(), expired.end());
    }
}

std::size_t Agent::Impl::progress() {
    std::size_t n = 0;
    // Queued transfers: a bounded number of chunks per call, the lock released between them so
    // callers of write_blocks/poll never wait behind a whole large transfer.
    // The transport is progressed between chunks only while more chunks wait; the last chunk
    // is progressed below with everything else (each UCX progress call over tcp is a syscall).
    for (int i = 0; i < kChunksPerProgress; ++i) {
        ProgressLock lk(mu_);
        if (post_queue_.empty()) {
            break;
        }
        bool more = pump_locked();
        ++n;
        if (!more) {
            break;
        }
        n += backend_->progress();
    }
    {
        ProgressLock lk(mu_);
        drain_wake_locked();
        n += backend_->progress();
        if (!reconnect_.empty()) {
            reconnect_pending_locked();
            ++n;
        }
        // Deadlines, heartbeats, peer timeouts and lease expiry at most once per kTickEvery:
        // a caller that busy-polls progress() does not walk every transfer on every call.
        const auto now = Clock::now();
        if (now >= next_tick_) {
            next_tick_ = now + kTickEvery;
            tick_locked(now);
        }
        n += callbacks_.size() + received_.size() + peer_events_.size();
    }
    run_callbacks();
    return n;
}

void Agent::Impl::drain_wake_locked() {
    // Only when wake() wrote the fd (it sets the flag after writing), so a progress() call
    // without a wake-up costs no syscall. One read() empties an eventfd (not EFD_SEMAPHORE).
    std::uint64_t v;
    if (wake_signalled_.exchange(false, std::memory_order_acquire)) {
        [[maybe_unused]] auto r = ::read(wake_fd_, &v, sizeof v);
    }
}

void Agent::Impl::run_callbacks() {
    // The agents whose callbacks run on this thread, innermost last. A callback may drive
    // progress() of its own agent or of another one (A -> B -> A...): an agent already on the
    // stack does not run callbacks re-entrantly (its queued ones run on a later progress()),
    // and callback_mu_ (one runner per agent) is never locked twice by one thread. Nested in
    // another agent's callback, a runner of another thread is not waited for either (that
    // would be a lock-order inversion between two agents' runners): the callbacks stay queued.
    thread_local std::vector<const Impl*> running;
    if (std::find(running.begin(), running.end(), this) != running.end()) {
        return;
    }
    std::unique_lock run(callback_mu_, std::defer_lock);
    if (running.empty()) {
        run.lock();
    } else if (!run.try_lock()) {
        return;
    }
    running.push_back(this);
    struct Pop {
        ~Pop() { running.pop_back(); }
    } pop;
    // Until nothing is queued: what callbacks queue meanwhile (or a runner that gave way above
    // left behind) runs now, not at some later progress().
    for (;;) {
        std::vector<std::pair<CompletionFn, TransferResult>> cbs;
        std::vector<ReceivedNotification> notes;
        std::vector<PeerEvent> events;
        NotificationFn handler;
        PeerEventFn peer_handler;
        {
            ProgressLock lk(mu_);
            cbs.swap(callbacks_);
            events.swap(peer_events_);
            peer_handler = peer_handler_;
            handler = notification_handler_;
            if (handler) {
                notes.swap(received_);
            } else if (!received_.empty()) {
                std::lock_guard nl(notes_mu_);
                if (undrained_.empty()) {
                    undrained_.swap(received_);
                } else {
                    for (auto& r : received_) {
                        undrained_.push_back(std::move(r));
                    }
                    received_.clear();
                }
            }
        }
        if (cbs.empty() && notes.empty() && events.empty()) {
            return;
        }
        for (auto& [fn, res] : cbs) {
            fn(res);
        }
        for (auto& e : events) {  // after the transfers it ended
            if (peer_handler) {
                peer_handler(e);
            }
        }
        for (auto& n : notes) {
            handler(n);
        }
    }
}

bool Agent::Impl::arm() {
    std::lock_guard lk(mu_);
    if (needs_progress_locked() || !backend_->arm()) {
        return false;
    }
    if (cfg_.progress == ProgressMode::EventFd) {
        // The caller is about to wait on event_fd(): refresh its ready list (stale entries
        // dropped, so an outer edge-triggered loop sees the next edge) and consume the tick
        // timer and a wake-up if they fired (both only here, not in every progress() call).
        epoll_event ev[8];
        int ready = ::epoll_wait(epoll_fd_, ev, 8, 0);
        for (int i = 0; i < ready; ++i) {
            if (ev[i].data.fd == timer_fd_) {
                std::uint64_t v;
                [[maybe_unused]] auto r = ::read(timer_fd_, &v, sizeof v);
            } else if (ev[i].data.fd == wake_fd_) {
                drain_wake_locked();
            }
        }
        sleeping_ = true;  // post() wakes the fd from now on (see post())
    }
    return true;
}

void Agent::Impl::wake() {
    std::uint64_t one = 1;
    [[maybe_unused]] auto n = ::write(wake_fd_, &one, sizeof one);
    wake_signalled_.store(true, std::memory_order_release);  // after the write: see progress()
}

void Agent::Impl::thread_main() {
    const bool spin = cfg_.progress_spin.count() > 0;
    Clock::time_point active{};  // the last progress() that found work (progress_spin only)
    while (!stop_) {
        const std::size_t did = progress();
        if (spin) {
            const auto now = Clock::now();
            if (did > 0) {
                active = now;
            } else if (now - active < cfg_.progress_spin) {
                continue;  // keep polling: the next write of a stream needs no wake-up
            }
        }
        {
            // sleeping_ is set under the lock that post() checks it under: a post that comes
            // after this point sees it and writes the wake-up fd.
            ProgressLock lk(mu_);
            if (stop_ || needs_progress_locked() || !backend_->arm()) {
                continue;
            }
            sleeping_ = true;
        }
        epoll_event ev[4];
        ::epoll_wait(epoll_fd_, ev, 4, static_cast<int>(kTick.count()));
        ProgressLock lk(mu_);
        sleeping_ = false;
    }
}

}  // namespace pdx
