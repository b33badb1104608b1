#include "sim/kv_agent.hpp"

#include "net/common/log.hpp"
#include "sim/kv_signal.hpp"

#include <boost/beast/core/detail/base64.hpp>

#include <algorithm>
#include <stdexcept>

namespace pdr::sim {

namespace {

constexpr std::string_view kDescriptorPath = "/internal/pdx/descriptor";

bool alive(const pdx::Agent& a, pdx::PeerHandle h) {
    auto info = a.peer_info(h);
    return info && info->alive;
}

std::string address_key(const std::string& host, unsigned short port) {
    return host + ":" + std::to_string(port);
}

}  // namespace

KvAgent::KvAgent(const net::any_io_executor& ex, const KvAgentConfig& cfg) : ex_(ex) {
    pdx::Config c;
    c.name = cfg.name;
    c.progress = pdx::ProgressMode::EventFd;
    c.transports = cfg.transports;
    c.net_devices = cfg.net_devices;
    auto created = pdx::Agent::create(c);
    if (!created) {
        throw std::runtime_error("transfer agent: " + created.message());
    }
    agent_ = std::move(*created);
    auto region = agent_->allocate_region(cfg.block_bytes * cfg.blocks);
    if (!region) {
        throw std::runtime_error("transfer agent: cannot allocate " + std::to_string(cfg.blocks) +
                                 " KV blocks of " + std::to_string(cfg.block_bytes) +
                                 " bytes: " + region.message());
    }
    pdx::Layout l;
    l.region = *region;
    l.block_bytes = cfg.block_bytes;
    l.count = static_cast<std::uint32_t>(cfg.blocks);
    auto layout = agent_->add_layout(l);
    if (!layout) {
        throw std::runtime_error("transfer agent: layout refused: " + layout.message());
    }
    layout_ = *layout;
    descriptor_ = agent_->descriptor();
    agent_->set_peer_handler([this](const pdx::PeerEvent& e) {
        std::erase_if(by_address_, [&](const auto& kv) { return kv.second.handle == e.peer; });
        std::erase_if(by_descriptor_, [&](const auto& kv) { return kv.second == e.peer; });
        if (peer_gone_) {
            peer_gone_(e);
        }
    });
    pump_ = std::make_unique<pdx::AsioPump>(ex_, *agent_);
    pump_->start();
}

KvAgent::~KvAgent() {
    stop();
}

void KvAgent::stop() noexcept {
    if (pump_) {
        pump_->stop();
    }
}

void KvAgent::set_note_handler(pdx::NotificationFn fn) {
    agent_->set_notification_handler(std::move(fn));
}

void KvAgent::set_peer_gone_handler(pdx::PeerEventFn fn) {
    peer_gone_ = std::move(fn);
}

awaitable<PeerRef> KvAgent::peer_at(upstream::Client& client, const std::string& host,
                                    unsigned short port, bool refresh) {
    const std::string key = address_key(host, port);
    if (auto it = by_address_.find(key);
        !refresh && it != by_address_.end() && alive(*agent_, it->second.handle)) {
        co_return it->second;
    }
    ++fetches_;
    upstream::Request req{http::verb::get, std::string(kDescriptorPath), 11};
    upstream::Timeouts t;
    t.connect = Duration{2000};
    t.response = Duration{5000};
    const upstream::Endpoint ep{host, port};
    auto res = co_await client.request(ep, std::move(req), t);
    PeerRef ref;
    if (!res.ok()) {
        ref.error = "side channel " + ep.authority() +
                    " unreachable: " + upstream::describe(res.failure, res.ec);
        co_return ref;
    }
    if (res.response.result_int() != 200) {
        ref.error = "side channel " + ep.authority() + " answered HTTP " +
                    std::to_string(res.response.result_int()) + " for the descriptor";
        co_return ref;
    }
    const std::string& body = res.response.body();
    const auto* bytes = reinterpret_cast<const std::byte*>(body.data());
    auto added = agent_->add_peer(std::span<const std::byte>(bytes, body.size()));
    if (!added) {
        ref.error = "peer at " + ep.authority() + " refused: " + added.message();
        co_return ref;
    }
    auto info = agent_->peer_info(*added);
    ref.handle = *added;
    ref.instance = info ? info->instance : 0;
    ref.name = info ? info->name : std::string();
    by_address_[key] = ref;
    co_return ref;
}

pdx::Result<pdx::PeerHandle> KvAgent::control_peer(const std::string& base64) {
    namespace b64 = boost::beast::detail::base64;
    std::string blob(b64::decoded_size(base64.size()), '\0');
    const auto [written, read] = b64::decode(blob.data(), base64.data(), base64.size());
    // Decoding stops at the padding: up to two '=' may follow, nothing else.
    const std::size_t padding = base64.size() - std::min(base64.size(), read);
    if (base64.empty() || base64.size() % 4 != 0 || padding > 2 ||
        base64.find_first_not_of('=', read) != std::string::npos) {
        return {pdx::Status::Invalid, "pdx_control is not base64"};
    }
    blob.resize(written);
    return peer_from(blob);
}

pdx::Result<pdx::PeerHandle> KvAgent::peer_from(const std::string& descriptor) {
    if (auto it = by_descriptor_.find(descriptor);
        it != by_descriptor_.end() && alive(*agent_, it->second)) {
        return it->second;
    }
    auto added = agent_->add_peer(std::as_bytes(std::span(descriptor.data(), descriptor.size())));
    if (!added) {
        return added;
    }
    by_descriptor_[descriptor] = *added;
    return *added;
}

awaitable<pdx::TransferResult> KvAgent::transfer(pdx::TransferRequest req, pdx::Direction dir) {
    auto sig = std::make_shared<Signal<pdx::TransferResult>>(ex_);
    req.on_complete = [sig](const pdx::TransferResult& r) { sig->fire(r); };
    auto posted =
        dir == pdx::Direction::Write ? agent_->write_blocks(req) : agent_->read_blocks(req);
    if (!posted) {
        pdx::TransferResult r;
        r.status = posted.status();
        r.message = posted.message();
        co_return r;
    }
    co_await wait_signal(*sig, Clock::time_point::max(), false);
    co_return *sig->value;
}

}  // namespace pdr::sim
