// KvReadyForwarder: KV-ready notifications to the router replica that issued their req_id.
#include "router/kv/kv_ready_forwarder.hpp"

#include <zmq.hpp>

#include "config/ascii.hpp"
#include "net/common/log.hpp"
#include "router/kv/kv_ready_owner.hpp"

namespace pdr::kv {

namespace {

constexpr std::string_view kLog = "kv-ready";

std::string endpoint_for(const config::InstanceAddress& a) {
    const bool v6 = a.host.find(':') != std::string::npos;
    return "tcp://" + (v6 ? "[" + a.host + "]" : a.host) + ":" + std::to_string(a.port);
}

}  // namespace

struct KvReadyForwarder::Zmq {
    zmq::context_t context{1};
};

struct KvReadyForwarder::Peer {
    Peer(zmq::context_t& ctx, std::string ep, int sndhwm, const std::string& curve_secret,
         const std::string& curve_public)
        : endpoint(std::move(ep)), socket(ctx, zmq::socket_type::push) {
        socket.set(zmq::sockopt::linger, 0);
        socket.set(zmq::sockopt::sndhwm, sndhwm);
        socket.set(zmq::sockopt::ipv6, true);
        if (!curve_secret.empty()) {
            socket.set(zmq::sockopt::curve_serverkey, curve_public);
            socket.set(zmq::sockopt::curve_publickey, curve_public);
            socket.set(zmq::sockopt::curve_secretkey, curve_secret);
        }
        socket.connect(endpoint);
    }
    std::string endpoint;
    zmq::socket_t socket;
};

KvReadyForwarder::KvReadyForwarder(std::string self_id, int sndhwm, metrics::RouterMetrics& m)
    : self_(ascii::lower(self_id)),
      sndhwm_(std::max(sndhwm, 1)),
      metrics_(m),
      zmq_(std::make_unique<Zmq>()) {}

KvReadyForwarder::~KvReadyForwarder() {
    stop();
}

void KvReadyForwarder::stop() {
    stopped_ = true;
    peers_.clear();
    zmq_.reset();
    metrics_.kv_ready_peers.Set(0);
}

void KvReadyForwarder::use_curve(std::string secret_z85, std::string public_z85) {
    curve_secret_ = std::move(secret_z85);
    curve_public_ = std::move(public_z85);
    peers_.clear();
    rebuild();
}

void KvReadyForwarder::set_static(const std::vector<config::InstanceAddress>& peers) {
    static_ = peers;
    rebuild();
}

void KvReadyForwarder::set_discovered(const std::vector<config::InstanceAddress>& peers) {
    discovered_ = peers;
    rebuild();
}

void KvReadyForwarder::rebuild() {
    if (stopped_) {
        return;
    }
    std::map<std::string, std::string, std::less<>> wanted;  // id → endpoint; static first
    for (const auto* list : {&static_, &discovered_}) {
        for (const auto& a : *list) {
            std::string id = ascii::lower(a.host);
            if (id != self_) {
                wanted.emplace(std::move(id), endpoint_for(a));
            }
        }
    }
    for (auto it = peers_.begin(); it != peers_.end();) {
        auto w = wanted.find(it->first);
        if (w == wanted.end() || w->second != it->second->endpoint) {
            PDR_INFO(kLog, "peer replica " + it->first + " at " + it->second->endpoint +
                               " left; its queued notifications are dropped");
            it = peers_.erase(it);
        } else {
            ++it;
        }
    }
    for (auto& [id, endpoint] : wanted) {
        if (peers_.contains(id)) {
            continue;
        }
        try {
            auto peer = std::make_unique<Peer>(zmq_->context, endpoint, sndhwm_, curve_secret_,
                                               curve_public_);
            PDR_INFO(kLog,
                     "forwarding the notifications of peer replica " + id + " to " + endpoint);
            peers_.emplace(id, std::move(peer));
        } catch (const zmq::error_t& e) {
            PDR_WARN(kLog,
                     "cannot connect to peer replica " + id + " at " + endpoint + ": " + e.what());
        }
    }
    metrics_.kv_ready_peers.Set(static_cast<double>(peers_.size()));
}

KvReadyForwarder::Result KvReadyForwarder::forward(std::string_view owner, std::string_view frame) {
    auto it = peers_.find(ascii::lower(owner));
    if (it == peers_.end()) {
        return Result::UnknownOwner;
    }
    zmq::socket_t& sock = it->second->socket;
    try {
        // Multipart messages are atomic: once the first part is queued, the second is too.
        if (!sock.send(zmq::buffer(kForwardedMark.data(), kForwardedMark.size()),
                       zmq::send_flags::sndmore | zmq::send_flags::dontwait)) {
            return Result::QueueFull;
        }
        (void)sock.send(zmq::buffer(frame.data(), frame.size()), zmq::send_flags::dontwait);
    } catch (const zmq::error_t& e) {
        PDR_WARN(kLog, "forwarding to peer replica " + it->first + " failed: " + e.what());
        return Result::QueueFull;
    }
    return Result::Sent;
}

std::string KvReadyForwarder::endpoint_of(std::string_view id) const {
    auto it = peers_.find(ascii::lower(id));
    return it == peers_.end() ? std::string{} : it->second->endpoint;
}

}  // namespace pdr::kv
