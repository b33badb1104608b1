#include "router/kv/control_agent.hpp"

#include "net/common/log.hpp"
#include "net/common/shared_state.hpp"
#include "pdx/agent.hpp"
#include "pdx/asio_pump.hpp"

#include <boost/beast/core/detail/base64.hpp>
#include <nlohmann/json.hpp>

namespace pdr::kv {

namespace {

constexpr std::string_view kLog = "transfer";
constexpr std::string_view kDescriptorPath = "/internal/pdx/descriptor";
// An engine without a pdx side channel is asked again after this long.
constexpr Duration kNoPdxRetry{60000};
// How long an ended watch still takes P's late copy of its terminal note.
constexpr Duration kLateNoteWindow{10000};
constexpr std::size_t kMaxEndedWatches = 65536;
// Room for the ids of one Heartbeat note: the payload limit less the JSON around them.
constexpr std::size_t kHeartbeatRoom = pdx::kMaxNotifyPayload - 64;

using Json = nlohmann::json;

std::string payload_of(const Json& j) {
    return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

std::string base64(const std::vector<std::byte>& blob) {
    namespace b64 = boost::beast::detail::base64;
    std::string out(b64::encoded_size(blob.size()), '\0');
    out.resize(b64::encode(out.data(), blob.data(), blob.size()));
    return out;
}

}  // namespace

std::uint64_t note_id(std::string_view s) noexcept {
    std::uint64_t h = 0xcbf29ce484222325ULL;
    for (const char c : s) {
        h ^= static_cast<unsigned char>(c);
        h *= 0x100000001b3ULL;
    }
    return h == 0 ? 1 : h;
}

ControlAgent::ControlAgent(net::any_io_executor ex, upstream::Client& client,
                           metrics::RouterMetrics& m, ControlAgentOptions options)
    : ex_(std::move(ex)), client_(client), metrics_(m), options_(std::move(options)), tasks_(ex_) {}

ControlAgent::~ControlAgent() {
    stop();
}

bool ControlAgent::start(std::string& error) {
    if (pump_) {
        return true;
    }
    pdx::Config c;
    c.backend = pdx::BackendKind::Ucx;
    c.progress = pdx::ProgressMode::EventFd;
    c.transports = options_.transports;
    c.net_devices = options_.net_devices;
    auto created = pdx::Agent::create(c);
    if (!created.ok()) {
        error = "the router's transfer agent cannot start (" +
                std::string(pdx::to_string(created.status())) + "): " + created.message();
        return false;
    }
    agent_ = std::move(created.value());
    agent_->set_notification_handler([this](const pdx::ReceivedNotification& n) {
        on_note(n.peer, static_cast<int>(n.notification.kind), n.notification.transfer_id,
                n.notification.payload);
    });
    agent_->set_peer_handler([this](const pdx::PeerEvent& e) {
        for (auto& [name, peer] : peers_) {
            if (peer.handle == e.peer) {
                PDR_INFO(kLog, "prefill " + name + "'s transfer agent is gone (" + e.message +
                                   "): its descriptor is fetched again when needed");
                peer.handle = 0;
            }
        }
    });
    descriptor_b64_ = base64(agent_->descriptor());
    pump_ = std::make_unique<pdx::AsioPump>(ex_, *agent_);
    pump_->start();
    PDR_INFO(kLog, "transfer agent started (descriptor " + std::to_string(descriptor_b64_.size()) +
                       " base64 bytes)");
    return true;
}

void ControlAgent::stop() {
    tasks_.stop();
    if (pump_) {
        pump_->stop();
        pump_.reset();
    }
}

std::size_t ControlAgent::peers() const noexcept {
    SharedLock lock;
    std::size_t n = 0;
    for (const auto& [name, peer] : peers_) {
        n += peer.handle != 0 ? 1 : 0;
    }
    return n;
}

awaitable<std::uint64_t> ControlAgent::peer_of(const upstream::Endpoint& prefill) {
    if (!pump_) {
        co_return 0;
    }
    const std::string key = prefill.authority();
    if (auto it = peers_.find(key); it != peers_.end()) {
        if (it->second.handle != 0) {
            co_return it->second.handle;
        }
        if (Clock::now() < it->second.no_pdx_until) {
            co_return 0;
        }
    }
    upstream::Request req{http::verb::get, kDescriptorPath, 11};
    req.keep_alive(true);
    const upstream::Timeouts t{Duration{2000}, Duration{2000}, Duration{2000}};
    const TaskGroup::Alive alive = tasks_.alive();
    upstream::Result res = co_await client_.request(prefill, std::move(req), t);
    if (!alive || !pump_) {
        co_return 0;  // stopped (or gone) meanwhile: touch nothing
    }
    Peer& peer = peers_[key];
    if (!res.ok() || res.response.result_int() != 200) {
        // No pdx side channel (404 from vLLM or an older pdsim), or none reachable now.
        peer.no_pdx_until = Clock::now() + kNoPdxRetry;
        PDR_DEBUG(kLog, "prefill " + key + " has no pdx side channel (" +
                            (res.ok() ? "HTTP " + std::to_string(res.response.result_int())
                                      : std::string(upstream::to_string(res.failure))) +
                            "); HTTP is used for it");
        co_return 0;
    }
    const std::string& body = res.response.body();
    const auto added = agent_->add_peer(
        std::span<const std::byte>(reinterpret_cast<const std::byte*>(body.data()), body.size()));
    if (!added.ok()) {
        peer.no_pdx_until = Clock::now() + kNoPdxRetry;
        PDR_WARN(kLog, "prefill " + key + "'s transfer agent descriptor was refused (" +
                           std::string(pdx::to_string(added.status())) + ": " + added.message() +
                           ")");
        co_return 0;
    }
    peer.handle = added.value();
    co_return peer.handle;
}

std::uint64_t ControlAgent::cached_peer(const upstream::Endpoint& prefill) const {
    const auto it = peers_.find(prefill.authority());
    return it == peers_.end() ? 0 : it->second.handle;
}

void ControlAgent::prepare(const upstream::Endpoint& prefill) {
    SharedLock lock;
    if (!pump_ || tasks_.stopped()) {
        return;
    }
    const auto it = peers_.find(prefill.authority());
    if (it != peers_.end() &&
        (it->second.handle != 0 || it->second.fetching || Clock::now() < it->second.no_pdx_until)) {
        return;
    }
    peers_[prefill.authority()].fetching = true;
    tasks_.spawn(fetch(prefill));
}

awaitable<void> ControlAgent::fetch(upstream::Endpoint prefill) {
    const TaskGroup::Alive alive = tasks_.alive();
    co_await peer_of(prefill);
    if (alive) {
        peers_[prefill.authority()].fetching = false;
    }
}

void ControlAgent::abort(const upstream::Endpoint& prefill, std::string request_id,
                         std::string transfer_id) {
    SharedLock lock;
    if (!pump_ || tasks_.stopped()) {
        return;
    }
    if (const std::uint64_t peer = cached_peer(prefill); peer != 0) {
        notify_abort(peer, prefill, request_id, transfer_id);
        return;
    }
    tasks_.spawn(send_abort(prefill, std::move(request_id), std::move(transfer_id)));
}

awaitable<void> ControlAgent::send_abort(upstream::Endpoint prefill, std::string request_id,
                                         std::string transfer_id) {
    const TaskGroup::Alive alive = tasks_.alive();
    const std::uint64_t peer = co_await peer_of(prefill);
    if (!alive) {
        co_return;
    }
    if (peer == 0) {
        metrics_.transfer_note_sent("abort", "no_pdx");
        co_return;
    }
    notify_abort(peer, prefill, request_id, transfer_id);
}

void ControlAgent::notify_abort(std::uint64_t peer, const upstream::Endpoint& prefill,
                                const std::string& request_id, const std::string& transfer_id) {
    Json j = {{"request_id", request_id}};
    if (!transfer_id.empty()) {
        j["transfer_id"] = transfer_id;
    }
    pdx::Notification n;
    n.kind = pdx::NotifyKind::Abort;
    n.transfer_id = note_id(request_id);
    n.payload = payload_of(j);
    const auto sent = agent_->notify(peer, n);
    metrics_.transfer_note_sent("abort", sent.ok() ? "ok" : "failed");
    if (sent.ok()) {
        PDR_DEBUG(kLog, "Abort sent to " + prefill.authority(), request_id);
    } else {
        PDR_WARN(kLog,
                 "Abort to " + prefill.authority() + " failed: " + sent.message() +
                     " (its blocks wait for their lease)",
                 request_id);
    }
}

awaitable<bool> ControlAgent::renew(const upstream::Endpoint& prefill,
                                    const std::vector<std::string>& ids) {
    const TaskGroup::Alive alive = tasks_.alive();
    const std::uint64_t peer = co_await peer_of(prefill);
    if (!alive || peer == 0) {
        co_return false;
    }
    std::size_t at = 0;
    while (at < ids.size()) {
        Json list = Json::array();
        std::size_t used = 0;
        while (at < ids.size() && (list.empty() || used + ids[at].size() + 3 <= kHeartbeatRoom)) {
            used += ids[at].size() + 3;
            list.push_back(ids[at++]);
        }
        pdx::Notification n;
        n.kind = pdx::NotifyKind::Heartbeat;
        n.payload = payload_of(Json{{"request_ids", std::move(list)}});
        if (n.payload.size() > pdx::kMaxNotifyPayload) {
            co_return false;  // one id longer than a note: HTTP takes it
        }
        const auto sent = agent_->notify(peer, n);
        metrics_.transfer_note_sent("heartbeat", sent.ok() ? "ok" : "failed");
        if (!sent.ok()) {
            PDR_WARN(kLog, "Heartbeat to " + prefill.authority() + " failed: " + sent.message() +
                               "; renewing over HTTP");
            co_return false;
        }
    }
    co_return true;
}

ControlAgent::Watch ControlAgent::watch(std::string transfer_id, net::any_io_executor where,
                                        std::function<void(const TransferEnd&)> on_end) {
    SharedLock lock;
    if (!pump_) {
        return {};
    }
    const Clock::time_point now = Clock::now();
    forget_old_watches(now);
    watches_[transfer_id] = Watcher{std::move(on_end), std::move(where), ++next_watch_serial_, now};
    return Watch(this, std::move(transfer_id));
}

void ControlAgent::forget_old_watches(Clock::time_point now) {
    while (!ended_.empty() &&
           (now - ended_.front().first > kLateNoteWindow || ended_.size() > kMaxEndedWatches)) {
        const auto w = watches_.find(ended_.front().second);
        if (w != watches_.end() && !w->second.on_end) {
            watches_.erase(w);
        }
        ended_.pop_front();
    }
}

ControlAgent::Watch::~Watch() {
    if (owner_ == nullptr) {
        return;
    }
    SharedLock lock;
    const auto w = owner_->watches_.find(id_);
    if (w != owner_->watches_.end()) {
        w->second.on_end = nullptr;  // kept a while for a late copy (timing and counting only)
        owner_->ended_.emplace_back(Clock::now(), std::move(id_));
    }
}

void ControlAgent::on_note(std::uint64_t /*peer*/, int kind, std::uint64_t transfer_id,
                           std::string_view payload) {
    const auto k = static_cast<pdx::NotifyKind>(kind);
    const std::string_view kind_name = k == pdx::NotifyKind::Done     ? "done"
                                       : k == pdx::NotifyKind::Failed ? "failed"
                                                                      : "other";
    if (k != pdx::NotifyKind::Done && k != pdx::NotifyKind::Failed) {
        metrics_.transfer_note_received(kind_name, "unknown");
        return;
    }
    const Json j = Json::parse(payload, nullptr, false);
    const auto id = j.is_object() ? j.find("transfer_id") : j.end();
    if (id == j.end() || !id->is_string() || note_id(id->get<std::string>()) != transfer_id) {
        metrics_.transfer_note_received(kind_name, "malformed");
        PDR_WARN(kLog, "a " + std::string(kind_name) +
                           " note whose payload does not name its transfer id was ignored");
        return;
    }
    const auto w = watches_.find(id->get<std::string>());
    if (w == watches_.end()) {
        metrics_.transfer_note_received(kind_name, "unknown");
        return;  // the request ended already
    }
    metrics_.transfer_note_received(kind_name, "matched");
    TransferEnd end;
    end.ok = k == pdx::NotifyKind::Done;
    if (auto b = j.find("bytes"); b != j.end() && b->is_number_unsigned()) {
        end.bytes = b->get<std::uint64_t>();
    }
    if (auto e = j.find("error"); e != j.end() && e->is_string()) {
        end.error = e->get<std::string>();
    }
    if (end.ok) {
        metrics_.transfer_seconds.Observe(
            std::chrono::duration<double>(Clock::now() - w->second.started).count());
        metrics_.transfer_bytes.Increment(static_cast<double>(end.bytes));
    }
    if (!w->second.on_end) {
        watches_.erase(w);  // a late copy: the request ended already
        return;
    }
    // On the watcher's thread, if the watch is still there then (it ends on that thread).
    net::post(w->second.where,
              [this, id = w->first, serial = w->second.serial, end = std::move(end)] {
                  std::function<void(const TransferEnd&)> on_end;
                  {
                      SharedLock lock;
                      const auto now = watches_.find(id);
                      if (now == watches_.end() || now->second.serial != serial) {
                          return;
                      }
                      on_end = now->second.on_end;  // a copy: the callback may end the watch
                  }
                  if (on_end) {
                      on_end(end);
                  }
              });
}

}  // namespace pdr::kv
