#pragma once
// KvReadyForwarder: one ZMQ PUSH socket per other router replica (lmcache mode, issue 18). A
// KV-ready notification for a request another replica issued (kv_ready_owner.hpp) goes to that
// replica's PULL socket as [kForwardedMark, the frame unchanged].
//
// Peers: a replica's id is the host it is reached at, so a peer address HOST:PORT is replica
// HOST at tcp://HOST:PORT. The set is the static list (--peer-routers) and the discovered one
// (--peer-routers-dns, replaced at each successful lookup); this replica's own id is left out.
// A peer that leaves the set has its socket closed (queued messages dropped).
//
// Never blocks: each send is ZMQ_DONTWAIT; a peer whose queue holds `sndhwm` messages (it is
// down or slow) makes the send fail with QueueFull. libzmq connects and reconnects by itself;
// messages wait in the queue meanwhile. Single-threaded: call from the router's executor.
#include <cstddef>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "config/config.hpp"
#include "router/metrics/router_metrics.hpp"

namespace pdr::kv {

class KvReadyForwarder {
public:
    enum class Result { Sent, QueueFull, UnknownOwner };

    KvReadyForwarder(std::string self_id, int sndhwm, metrics::RouterMetrics& m);
    ~KvReadyForwarder();
    KvReadyForwarder(const KvReadyForwarder&) = delete;
    KvReadyForwarder& operator=(const KvReadyForwarder&) = delete;

    const std::string& self_id() const noexcept { return self_; }
    void set_static(const std::vector<config::InstanceAddress>& peers);
    void set_discovered(const std::vector<config::InstanceAddress>& peers);

    // Sends `frame` to replica `owner` (never this one: the caller keeps its own ids).
    Result forward(std::string_view owner, std::string_view frame);

    std::size_t peers() const noexcept { return peers_.size(); }
    // The endpoint used for replica `id` ("" when unknown); for logs and tests.
    std::string endpoint_of(std::string_view id) const;
    void stop();  // closes every socket; later forwards are UnknownOwner
    // CURVE toward the peers (their PULL sockets share this router's key pair: see
    // kv_ready_guard.hpp): the peer sockets are made again with it.
    void use_curve(std::string secret_z85, std::string public_z85);

private:
    struct Zmq;
    struct Peer;
    void rebuild();

    std::string self_;
    int sndhwm_;
    metrics::RouterMetrics& metrics_;
    std::vector<config::InstanceAddress> static_, discovered_;
    std::unique_ptr<Zmq> zmq_;
    std::map<std::string, std::unique_ptr<Peer>, std::less<>> peers_;  // by replica id
    std::string curve_secret_, curve_public_;                          // empty: no CURVE
    bool stopped_ = false;
};

}  // namespace pdr::kv
