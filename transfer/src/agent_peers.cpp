// Agent: descriptors and peers (add/remove, generations, error mode selection).
#include <cstdlib>

#include <optional>

#include "agent_impl.hpp"

namespace pdx {
namespace {

bool mentions_shm(const std::string& tls) {
    if (tls.empty() || tls == "all") {
        return true;
    }
    if (tls[0] == '^') {
        return true;  // deny list: shm stays possible
    }
    for (const char* t : {"posix", "sysv", "sm", "shm", "mm", "cma", "knem", "xpmem"}) {
        if (tls.find(t) != std::string::npos) {
            return true;
        }
    }
    return false;
}

}  // namespace

// ---- peers -------------------------------------------------------------------------------

std::vector<std::byte> Agent::descriptor() const {
    std::lock_guard lk(impl_->mu_);
    detail::Descriptor d;
    d.compat = detail::compat_hash();
    d.instance = impl_->instance_;
    d.backend = impl_->cfg_.backend;
    d.name = impl_->cfg_.name;
    d.host_id = impl_->host_id_;
    d.process = impl_->process_;
    d.address = impl_->backend_->address();
    for (auto& r : impl_->regions_) {
        detail::RemoteRegion rr;
        if (r.live) {
            rr.base = reinterpret_cast<std::uint64_t>(r.mem.base);
            rr.size = r.mem.size;
            rr.rkey = r.mem.rkey;
        }
        d.regions.push_back(std::move(rr));
    }
    d.layouts = impl_->layouts_;
    return detail::encode_descriptor(d);
}

bool Agent::Impl::decide_peer_error_mode(bool same_host) const {
    if (cfg_.backend == BackendKind::Loopback) {
        return false;
    }
    if (cfg_.error_mode == ErrorMode::Peer) {
        return true;
    }
    if (cfg_.error_mode == ErrorMode::None) {
        return false;
    }
    // PEER mode only costs us shm lanes; without any, take UCX's failure reports.
    return !same_host || !shm_possible();
}

bool Agent::Impl::shm_possible() const {
    std::string tls = cfg_.transports;
    if (tls.empty()) {
        const char* env = std::getenv("UCX_TLS");
        tls = env ? env : "";
    }
    return mentions_shm(tls);
}

PeerInfo Agent::Impl::info(const Peer& p) const {
    PeerInfo i;
    i.handle = p.handle;
    i.name = p.name;
    i.instance = p.instance;
    i.generation = p.generation;
    i.alive = p.state == PeerState::Alive;
    i.same_host = p.same_host;
    i.peer_error_mode = p.peer_error_mode;
    i.am_writes = p.conn != 0 && backend_->am_writes(p.conn);
    i.process_watched = p.process.state() == detail::ProcessWatch::State::Running;
    i.layouts = static_cast<std::uint32_t>(p.desc.layouts.size());
    if (p.heard) {
        i.ms_since_heard =
            std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - p.last_heard)
                .count();
    }
    return i;
}

Result<PeerHandle> Agent::add_peer(std::span<const std::byte> blob) {
    auto d = detail::decode_descriptor(blob);
    if (!d) {
        return {d.status(), d.message()};
    }
    std::unique_lock lk(impl_->mu_);
    Result<PeerHandle> h = impl_->add_peer_locked(std::move(*d), true);
    lk.unlock();
    if (h) {
        impl_->wake();
    }
    return h;
}

Result<PeerHandle> Agent::Impl::add_peer_locked(detail::Descriptor desc, bool may_tell_reconnect) {
    auto& im = *this;
    auto* d = &desc;
    if (d->backend != im.cfg_.backend) {
        return {Status::Invalid, "add_peer: backend kind differs"};
    }
    if (d->instance == im.instance_) {
        return {Status::Invalid, "add_peer: own descriptor"};
    }
    auto known = im.by_instance_.find(d->instance);
    if (known != im.by_instance_.end()) {
        Peer& p = im.peers_.at(known->second);
        if (p.state == PeerState::Alive) {
            auto u = im.backend_->update_regions(p.conn, d->regions);
            if (!u) {
                return {u.status(), u.message()};
            }
            p.desc = std::move(*d);
            return p.handle;
        }
    }
    // A late copy of a descriptor whose instance a newer generation already replaced must not
    // come back to life (it would retire the live generation in turn).
    if (im.superseded_.count(d->instance)) {
        return {Status::Invalid, "add_peer: instance " + std::to_string(d->instance) + " of '" +
                                     d->name +
                                     "' was replaced by a newer generation (stale descriptor)"};
    }
    const bool named = !d->name.empty();  // only named peers have generations (see Config::name)
    // This instance was declared gone here and its connection closed: its own connection to
    // us may outlive ours (a peer that was stopped and kept taking us for alive).
    std::optional<Clock::time_point> closed_at;
    for (const auto& [handle, old] : im.peers_) {
        if (!may_tell_reconnect) {
            break;
        }
        if (old.instance == d->instance && old.state != PeerState::Alive &&
            (!closed_at || old.gone_at > *closed_at)) {
            closed_at = old.gone_at;
        }
    }
    Peer p;
    p.same_host = d->host_id == im.host_id_;
    if (p.same_host) {
        p.process = detail::ProcessWatch::open(d->process, im.process_);
        if (p.process.state() == detail::ProcessWatch::State::Ended) {
            return {Status::PeerGone, "add_peer: the process of '" + d->name + "' (" +
                                          p.process.what() + ") has ended"};
        }
    }
    p.peer_error_mode = im.decide_peer_error_mode(p.same_host);
    detail::ConnectParams cp{d->address, &d->regions, p.peer_error_mode};
    auto conn = im.backend_->connect(cp);
    if (!conn) {  // the previous generation (if any) stays as it was
        return {conn.status(), conn.message()};
    }
    if (named) {
        // The connection exists: only now is the previous generation (if any) retired.
        auto& rec = im.names_[d->name];
        if (rec.generations > 0 && rec.instance != d->instance) {
            im.superseded_.insert(rec.instance);
        }
        rec.instance = d->instance;
        auto prev = im.by_name_.find(d->name);
        if (prev != im.by_name_.end()) {
            auto it = im.peers_.find(prev->second);
            if (it != im.peers_.end()) {
                // Alive: another instance (the same one alive was refreshed above). Otherwise
                // gone already (maybe this very instance, re-added after a timeout).
                if (it->second.state == PeerState::Alive) {
                    im.peer_gone(it->second, PeerState::Replaced, PeerGoneReason::Replaced,
                                 "replaced by a new generation of '" + d->name + "'");
                } else {
                    it->second.state = PeerState::Replaced;
                }
                // Kept only to answer its stale handle: its descriptor (worker address, packed
                // keys, layouts) is dead weight once a newer generation took over.
                it->second.desc = {};
            }
        }
    }
    p.handle = ++im.next_peer_;
    p.name = d->name;
    p.instance = d->instance;
    p.generation = named ? ++im.names_[d->name].generations : 1;
    p.host_id = d->host_id;
    p.conn = *conn;
    p.desc = std::move(*d);
    p.last_heard = Clock::now();
    p.connected_at = p.last_heard;
    PeerHandle h = p.handle;
    im.by_conn_[p.conn] = h;
    im.by_instance_[p.instance] = h;
    if (named) {
        im.by_name_[p.name] = h;
    }
    auto& stored = im.peers_.emplace(h, std::move(p)).first->second;
    im.watch_process(stored, true);
    ++im.stats_.peers;
    Notification hb;
    hb.kind = NotifyKind::Heartbeat;
    std::uint8_t flags = detail::kNotifyFlagInternal;
    if (closed_at) {
        flags |= detail::kNotifyFlagReconnect;
        hb.transfer_id = static_cast<std::uint64_t>(
            std::chrono::duration_cast<std::chrono::milliseconds>(stored.connected_at - *closed_at)
                .count());
        hb.sequence = static_cast<std::uint32_t>(
            std::min<std::int64_t>(cfg_.peer_timeout.count(), 0xffffffff));
    }
    im.send_locked(stored, hb, flags);
    return h;
}

Result<void> Agent::remove_peer(PeerHandle peer) {
    auto& im = *impl_;
    {
        std::lock_guard lk(im.mu_);
        auto it = im.peers_.find(peer);
        if (it == im.peers_.end()) {
            return {Status::NotFound, "unknown peer handle"};
        }
        if (it->second.state == Impl::PeerState::Replaced) {  // kept only to answer stale calls
            return {Status::NotFound, "stale peer handle " + std::to_string(peer) +
                                          " (replaced by a newer generation)"};
        }
        im.peer_gone(it->second, Impl::PeerState::Replaced, PeerGoneReason::Removed,
                     "peer removed");
        if (im.by_name_.count(it->second.name) && im.by_name_[it->second.name] == peer) {
            im.by_name_.erase(it->second.name);
        }
        if (im.last_peer_handle_ == peer) {
            im.last_peer_ = nullptr;
        }
        im.peers_.erase(it);
    }
    im.wake();
    return {};
}

Result<PeerInfo> Agent::peer_info(PeerHandle peer) const {
    std::lock_guard lk(impl_->mu_);
    auto it = impl_->peers_.find(peer);
    if (it == impl_->peers_.end()) {
        return {Status::NotFound, "unknown peer handle"};
    }
    return impl_->info(it->second);
}

void Agent::set_peer_handler(PeerEventFn handler) {
    std::lock_guard lk(impl_->mu_);
    impl_->peer_handler_ = std::move(handler);
}

std::vector<PeerInfo> Agent::peers() const {
    std::lock_guard lk(impl_->mu_);
    std::vector<PeerInfo> out;
    for (auto& [h, p] : impl_->peers_) {
        out.push_back(impl_->info(p));
    }
    return out;
}

}  // namespace pdx
