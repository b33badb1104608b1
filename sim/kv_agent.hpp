#pragma once
// pdsim's transfer-core endpoint (docs/transfer.md, "How an engine uses the agent"): one
// pdx::Agent in EventFd mode, pumped on pdsim's strand (its callbacks run there), named after
// the engine id; one region it allocates holds the engine's KV blocks as one layout. Peers are
// reached over their side channel (GET /internal/pdx/descriptor, cached per host:port while the
// handle is alive); control peers (the router's agent) come as base64 descriptors, cached by
// value. Transfers are awaited from coroutines.
#include "net/common/io.hpp"
#include "net/upstream/client.hpp"
#include "pdx/agent.hpp"
#include "pdx/asio_pump.hpp"

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace pdr::sim {

struct KvAgentConfig {
    std::string name;         // the engine id
    std::string transports;   // UCX_TLS of the agent ("" = UCX's own choice)
    std::string net_devices;  // UCX_NET_DEVICES ("" = UCX's own choice)
    std::size_t block_bytes = 0;
    std::size_t blocks = 0;
};

// A peer reached over its side channel; `handle` is kNoPeer and `error` says why on failure.
struct PeerRef {
    pdx::PeerHandle handle = pdx::kNoPeer;
    std::uint64_t instance = 0;
    std::string name;
    std::string error;
};

class KvAgent {
public:
    // Creates the agent, its region and layout, and starts pumping. Throws std::runtime_error.
    KvAgent(const net::any_io_executor& ex, const KvAgentConfig& cfg);
    ~KvAgent();
    KvAgent(const KvAgent&) = delete;
    KvAgent& operator=(const KvAgent&) = delete;

    pdx::Agent& agent() noexcept { return *agent_; }
    pdx::LayoutId layout() const noexcept { return layout_; }
    std::uint64_t instance() const noexcept { return agent_->instance(); }
    const std::vector<std::byte>& descriptor() const noexcept { return descriptor_; }
    std::span<std::byte> block(std::uint32_t id) const { return agent_->block(layout_, id); }
    std::uint64_t descriptor_fetches() const noexcept { return fetches_; }

    // The peer whose side channel is host:port: the cached handle while it is alive (and not
    // `refresh`), else its descriptor is fetched and added.
    awaitable<PeerRef> peer_at(upstream::Client& client, const std::string& host,
                               unsigned short port, bool refresh = false);
    // A control peer from its base64 descriptor (cached by value while alive).
    pdx::Result<pdx::PeerHandle> control_peer(const std::string& base64);
    // A peer from its descriptor's bytes (cached by value while alive).
    pdx::Result<pdx::PeerHandle> peer_from(const std::string& descriptor);

    // Posts `req` (a write or a read) and waits for its terminal state, whatever happens to the
    // awaiting coroutine meanwhile (the request's deadline bounds it): local blocks are safe to
    // reuse once it returns. A refused request comes back as a result with that status.
    awaitable<pdx::TransferResult> transfer(pdx::TransferRequest req, pdx::Direction dir);

    // Notes and peer losses, delivered on the strand.
    void set_note_handler(pdx::NotificationFn fn);
    void set_peer_gone_handler(pdx::PeerEventFn fn);
    // Stops the pump (no callback runs afterwards). Call on the strand.
    void stop() noexcept;

private:
    std::unique_ptr<pdx::Agent> agent_;
    std::unique_ptr<pdx::AsioPump> pump_;
    net::any_io_executor ex_;
    pdx::LayoutId layout_ = 0;
    std::vector<std::byte> descriptor_;
    std::map<std::string, PeerRef> by_address_;
    std::map<std::string, pdx::PeerHandle> by_descriptor_;
    pdx::PeerEventFn peer_gone_;
    std::uint64_t fetches_ = 0;
};

}  // namespace pdr::sim
