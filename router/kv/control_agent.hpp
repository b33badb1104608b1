#pragma once
// The router's own transfer-core agent (--transfer-agent; docs/protocols.md, "pdx engines"): a
// control peer of the prefill engines that embed pdx. It holds no memory, only notifications:
// - Abort: a request that ends without D consuming its KV frees P's blocks at once (one round
//   trip, not one lease);
// - Heartbeat: the LeaseKeeper renews leases with notes instead of HTTP posts (LeaseRenewer);
// - observation: P copies each push transfer's terminal note (Done/Failed) here; a flow that
//   watches the transfer id hears of it, and the transfer is timed and counted.
// An engine without pdx (no GET /internal/pdx/descriptor) is remembered as such for a minute
// and served over HTTP as before. Threads: the agent runs in EventFd mode, pumped on the
// control executor (net/common/shared_state.hpp), so its callbacks hold SharedLock; the
// members a worker calls (prepare, abort, watch, ~Watch, peers) take it themselves.
#include "net/common/io.hpp"
#include "net/common/task_group.hpp"
#include "net/upstream/client.hpp"
#include "router/kv/lease_keeper.hpp"
#include "router/metrics/router_metrics.hpp"

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace pdx {
class Agent;
class AsioPump;
}  // namespace pdx

namespace pdr::kv {

// The 64-bit transfer id of a note about `s` (docs/protocols.md): FNV-1a 64, 0 becomes 1.
std::uint64_t note_id(std::string_view s) noexcept;

struct ControlAgentOptions {
    std::string transports;   // UCX_TLS of the agent ("" = UCX's own choice)
    std::string net_devices;  // UCX_NET_DEVICES ("" = UCX's own choice)
};

// A push transfer's terminal note, copied to the router by P.
struct TransferEnd {
    bool ok = false;
    std::uint64_t bytes = 0;
    std::string error;  // Failed: what P said
};

class ControlAgent final : public LeaseRenewer {
public:
    ControlAgent(net::any_io_executor ex, upstream::Client& client, metrics::RouterMetrics& m,
                 ControlAgentOptions options);
    ~ControlAgent() override;
    ControlAgent(const ControlAgent&) = delete;
    ControlAgent& operator=(const ControlAgent&) = delete;

    // Creates the agent and starts pumping it. False with `error` when it cannot (no UCX).
    bool start(std::string& error);
    void stop();  // no note is sent and no callback runs afterwards
    bool running() const noexcept { return pump_ != nullptr; }

    // The agent's descriptor, base64: the prefill leg's "pdx_control".
    const std::string& descriptor_base64() const noexcept { return descriptor_b64_; }

    // Makes sure P's descriptor is known before it is needed (fetched in a task of its own the
    // first time), so that abort() can send at once.
    void prepare(const upstream::Endpoint& prefill);
    // Sends P an Abort for `request_id` (and `transfer_id`, push mode): at once when P's
    // descriptor is known, else in a task that fetches it first. P frees the request's blocks
    // at once. An engine without pdx is skipped (counted).
    void abort(const upstream::Endpoint& prefill, std::string request_id,
               std::string transfer_id = {});

    // LeaseRenewer: Heartbeat notes with the ids (as many notes as their size needs). False when
    // P has no pdx agent or a note could not be sent: the LeaseKeeper posts over HTTP then.
    awaitable<bool> renew(const upstream::Endpoint& prefill,
                          const std::vector<std::string>& ids) override;

    // Watches a push transfer: `on_end` runs on `where` (the watching flow's executor) when P's
    // copy of its terminal note arrives, if the Watch still lives then. Destroy the Watch on
    // `where`'s thread, before what `on_end` refers to.
    class Watch {
    public:
        Watch() = default;
        Watch(Watch&& o) noexcept : owner_(o.owner_), id_(std::move(o.id_)) { o.owner_ = nullptr; }
        Watch(const Watch&) = delete;
        Watch& operator=(const Watch&) = delete;
        Watch& operator=(Watch&&) = delete;
        ~Watch();

    private:
        friend class ControlAgent;
        Watch(ControlAgent* owner, std::string id) : owner_(owner), id_(std::move(id)) {}
        ControlAgent* owner_ = nullptr;
        std::string id_;
    };
    [[nodiscard]] Watch watch(std::string transfer_id, net::any_io_executor where,
                              std::function<void(const TransferEnd&)> on_end);

    std::size_t peers() const noexcept;  // prefill engines reached as pdx peers now

private:
    struct Peer {
        std::uint64_t handle = 0;          // pdx peer handle; 0 = none
        bool fetching = false;             // prepare()'s fetch is running
        Clock::time_point no_pdx_until{};  // the engine has no pdx side channel: ask again then
    };
    struct Watcher {
        std::function<void(const TransferEnd&)> on_end;  // empty once the Watch is gone
        net::any_io_executor where;                      // where on_end runs
        std::uint64_t serial = 0;                        // tells a watch from a later one
        Clock::time_point started;
    };
    void forget_old_watches(Clock::time_point now);
    // P's peer handle (its descriptor fetched from its side channel when needed); 0 if none.
    awaitable<std::uint64_t> peer_of(const upstream::Endpoint& prefill);
    awaitable<void> send_abort(upstream::Endpoint prefill, std::string request_id,
                               std::string transfer_id);
    awaitable<void> fetch(upstream::Endpoint prefill);
    void notify_abort(std::uint64_t peer, const upstream::Endpoint& prefill,
                      const std::string& request_id, const std::string& transfer_id);
    std::uint64_t cached_peer(const upstream::Endpoint& prefill) const;
    void on_note(std::uint64_t peer, int kind, std::uint64_t transfer_id, std::string_view payload);

    net::any_io_executor ex_;
    upstream::Client& client_;
    metrics::RouterMetrics& metrics_;
    ControlAgentOptions options_;
    std::unique_ptr<pdx::Agent> agent_;
    std::unique_ptr<pdx::AsioPump> pump_;
    std::string descriptor_b64_;
    std::unordered_map<std::string, Peer> peers_;       // by P's authority
    std::unordered_map<std::string, Watcher> watches_;  // by transfer id
    std::uint64_t next_watch_serial_ = 0;
    // Ended watches, oldest first: kept kLateNoteWindow so a copy that arrives after the
    // request ended (P's note to the router races D's answer) is still timed and counted.
    std::deque<std::pair<Clock::time_point, std::string>> ended_;
    TaskGroup tasks_;  // last: the note tasks
};

}  // namespace pdr::kv
