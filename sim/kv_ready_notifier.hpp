#pragma once
// A prefill's "KV ready" socket (LMCache mode): one ZMQ PUSH socket connected to the router's
// PULL endpoint. Sends never block: they run on pdsim's strand with ZMQ_DONTWAIT, so a message
// is queued by libzmq (its I/O thread does the network work) or, when the queue is full (the
// router is not reading), dropped and counted. That keeps the request path on the Asio loop
// without a thread of our own. Linger 0: close() drops what is still queued, at once.
#include <memory>
#include <string>
#include <vector>

namespace pdr::sim {

class KvReadyNotifier {
public:
    // Connects (ZMQ connects in the background; the peer may bind later). Throws
    // std::runtime_error on a bad endpoint.
    explicit KvReadyNotifier(const std::string& endpoint);
    ~KvReadyNotifier();
    KvReadyNotifier(const KvReadyNotifier&) = delete;
    KvReadyNotifier& operator=(const KvReadyNotifier&) = delete;

    // Queues one message of one or more frames. False when it could not be queued (queue
    // full, or closed).
    bool send(const std::vector<std::string>& frames);
    void close() noexcept;

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace pdr::sim
