// LMCache mode (docs/pdsim.md, "LMCache mode"): a prefill moves the prompt's KV to the decode's
// receivers and PUSHes one "KV ready" notification per TP rank; a decode claims the KV a
// token-id prompt needs before it generates.
#include "net/common/log.hpp"
#include "sim/kv_sender.hpp"
#include "sim/lmcache_wire.hpp"
#include "sim/sim_impl.hpp"

#include <boost/asio/experimental/parallel_group.hpp>

#include <algorithm>

namespace pdr::sim {

using nlohmann::json;

namespace {

constexpr Duration kTransferTimeout{5000};  // per network operation of one KV copy

bool listed(const std::vector<int>& ranks, int r) {
    return std::find(ranks.begin(), ranks.end(), r) != ranks.end();
}

// Sends the fault's malformed messages, then one notification per prefill rank.
void notify(SimServer::Impl& im, const std::string& req_id, const LmcacheFault& f) {
    Counters& c = im.state.counters;
    if (!im.notifier) {
        return;
    }
    for (NotifGarbage g : f.notif_garbage) {
        if (im.notifier->send(garbage_notif(g))) {
            ++c.lmcache_garbage_sent;
        }
    }
    const std::vector<std::string> message{proxy_notif(req_id)};
    for (int rank = 0; rank < im.cfg.lmcache.tp_size; ++rank) {
        if (listed(f.drop_notif_ranks, rank)) {
            ++c.lmcache_notifs_dropped;
            continue;
        }
        for (int copy = 0; copy < (f.notif_duplicate ? 2 : 1); ++copy) {
            if (im.notifier->send(message)) {
                ++c.lmcache_notifs_sent;
            } else {
                ++c.lmcache_notif_send_failures;
                PDR_WARN("pdsim", "lmcache: KV-ready notification not queued (queue full)", req_id);
            }
        }
    }
}

awaitable<void> notify_later(std::shared_ptr<SimServer::Impl> self, std::string req_id,
                             LmcacheFault f) {
    Timer timer(self->ex);
    timer.expires_after(Duration{f.notif_delay_ms});
    auto [ec] = co_await timer.async_wait();
    if (!ec && !self->stopping) {
        notify(*self, req_id, f);
    }
}

// Runs the copies at once; returns each one's error (empty: acknowledged), in rank order.
awaitable<std::vector<std::string>> send_all(net::any_io_executor ex,
                                             std::vector<awaitable<std::string>> sends) {
    using Op = decltype(net::co_spawn(ex, std::declval<awaitable<std::string>>(), net::deferred));
    std::vector<Op> ops;
    ops.reserve(sends.size());
    for (auto& s : sends) {
        ops.push_back(net::co_spawn(ex, std::move(s), net::deferred));
    }
    auto group = net::experimental::make_parallel_group(std::move(ops));
    auto [order, errors, results] =
        co_await group.async_wait(net::experimental::wait_for_all(), use_tuple);
    for (std::size_t i = 0; i < errors.size(); ++i) {
        if (errors[i]) {
            results[i] = "KV transfer failed with an exception";
        }
    }
    co_return results;
}

awaitable<bool> refuse_frame() {
    co_return false;
}

}  // namespace

void SimServer::Impl::lmcache_start() {
    if (cfg.kv_mode != KvMode::Lmcache) {
        return;
    }
    LmcacheConfig& l = cfg.lmcache;
    if (cfg.role == Role::Prefill) {
        if (!l.kv_ready_connect.empty()) {
            notifier = std::make_unique<KvReadyNotifier>(l.kv_ready_connect);
        }
        return;
    }
    if (l.init_ports.empty()) {  // a library user that left the ports out: tp_size free ports
        l.init_ports.assign(static_cast<std::size_t>(l.tp_size), 0);
        l.alloc_ports.assign(static_cast<std::size_t>(l.tp_size), 0);
    }
    l.tp_size = static_cast<int>(l.init_ports.size());
    const auto ttl =
        std::chrono::duration_cast<Duration>(std::chrono::duration<double>(l.kv_ttl_seconds));
    receiver.emplace(ex, ttl, l.max_kv_bytes);
    receiver->listen(cfg.host, l.init_ports, l.alloc_ports);
    if (agent) {
        std::weak_ptr<Impl> weak = shared_from_this();
        receiver->set_pdx_handler([weak](KvLink& link, const KvHeader& h) -> awaitable<bool> {
            if (auto self = weak.lock()) {
                return self->lmcache_accept(link, h);
            }
            return refuse_frame();
        });
    }
}

void SimServer::Impl::lmcache_stop() {
    lmcache_tasks.stop();
    if (receiver) {
        receiver->stop();
    }
    if (notifier) {
        notifier->close();
    }
}

awaitable<std::string> SimServer::Impl::lmcache_handover(const LmcacheParams& p,
                                                         std::vector<TokenId> ids, LmcacheFault f) {
    auto self = shared_from_this();
    if (!p.spec) {
        co_return std::string();  // nothing to move, nobody to notify
    }
    const DisaggSpec& spec = *p.spec;
    if (!notifier) {
        co_return std::string("lmcache: this prefill was started without --kv-ready-connect");
    }
    ++state.counters.lmcache_handovers;
    if (f.notif_early) {
        notify(*this, spec.req_id, f);
    }
    KvShipment kv;
    kv.key = hash_ids(ids);
    kv.tokens = static_cast<std::uint32_t>(ids.size());
    kv.block_tokens = static_cast<std::uint32_t>(cfg.block_size_tokens);
    kv.bytes_per_token = cfg.lmcache.kv_bytes_per_token;
    kv.req_id = spec.req_id;
    std::vector<awaitable<std::string>> sends;
    for (std::size_t r = 0; r < spec.alloc_ports.size(); ++r) {
        const int rank = static_cast<int>(r);
        if (listed(f.skip_kv_ranks, rank)) {
            ++state.counters.lmcache_kv_skipped;
            continue;
        }
        KvShipment copy = kv;
        copy.corrupt = listed(f.corrupt_kv_ranks, rank);
        KvTarget target{spec.receiver_host, spec.init_ports[r], spec.alloc_ports[r], rank};
        if (agent) {  // through the transfer core
            sends.push_back(lmcache_write(std::move(target), std::move(copy), kTransferTimeout));
        } else {
            sends.push_back(send_kv(std::move(target), std::move(copy), kTransferTimeout));
        }
    }
    std::vector<std::string> results;
    const auto started = Clock::now();
    if (!sends.empty()) {
        results = co_await send_all(ex, std::move(sends));
    }
    std::uint64_t sent_bytes = 0;
    for (const auto& e : results) {
        if (e.empty()) {
            sent_bytes += std::uint64_t{kv.tokens} * kv.bytes_per_token;
        }
    }
    if (sent_bytes > 0 && !agent) {  // through the agent, lmcache_write counts each write
        count_transfer(state.counters, sent_bytes, started);
    }
    std::string first_error;
    for (const auto& e : results) {
        if (e.empty()) {
            ++state.counters.lmcache_kv_sent;
        } else {
            ++state.counters.lmcache_kv_send_failures;
            PDR_WARN("pdsim", "lmcache: " + e, spec.req_id);
            if (first_error.empty()) {
                first_error = "lmcache: " + e;
            }
        }
    }
    if (!first_error.empty()) {
        co_return first_error;  // D lacks the KV: no notification, the request fails
    }
    if (f.notif_delay_ms > 0) {
        lmcache_tasks.spawn(notify_later(self, spec.req_id, f));
    } else if (!f.notif_early) {
        notify(*this, spec.req_id, f);
    }
    co_return std::string();
}

std::optional<std::string> SimServer::Impl::lmcache_claim(const std::vector<TokenId>& ids) {
    if (!receiver || ids.size() < 2) {
        return std::nullopt;
    }
    const std::span<const TokenId> computed(ids.data(), ids.size() - 1);
    return receiver->inbox().claim(hash_ids(computed), static_cast<std::uint32_t>(computed.size()),
                                   cfg.lmcache.tp_size);
}

json SimServer::Impl::lmcache_state_json() const {
    const Counters& c = state.counters;
    json j{{"kv_mode", kv_mode_name(cfg.kv_mode)},
           {"lmcache_handovers", c.lmcache_handovers},
           {"lmcache_kv_sent", c.lmcache_kv_sent},
           {"lmcache_kv_skipped", c.lmcache_kv_skipped},
           {"lmcache_kv_send_failures", c.lmcache_kv_send_failures},
           {"lmcache_notifs_sent", c.lmcache_notifs_sent},
           {"lmcache_notifs_dropped", c.lmcache_notifs_dropped},
           {"lmcache_notif_send_failures", c.lmcache_notif_send_failures},
           {"lmcache_garbage_sent", c.lmcache_garbage_sent}};
    if (receiver) {
        const InboxCounters& ic = receiver->inbox().counters();
        const ReceiverCounters& rc = receiver->counters();
        j.update(json{{"lmcache_init_ports", cfg.lmcache.init_ports},
                      {"lmcache_alloc_ports", cfg.lmcache.alloc_ports},
                      {"lmcache_kv_received", ic.received},
                      {"lmcache_kv_corrupt", ic.corrupt},
                      {"lmcache_kv_claimed", ic.claimed},
                      {"lmcache_kv_missing", ic.claim_failures},
                      {"lmcache_kv_expired", ic.expired},
                      {"lmcache_kv_evicted", ic.evicted},
                      {"lmcache_kv_copies_held", receiver->inbox().copies_held()},
                      {"lmcache_kv_bytes_held", receiver->inbox().bytes_held()},
                      {"lmcache_handshakes", rc.handshakes},
                      {"lmcache_bad_handshakes", rc.bad_handshakes},
                      {"lmcache_frames_rejected", rc.frames_rejected}});
    }
    return j;
}

void SimServer::Impl::lmcache_reset() {
    if (receiver) {
        receiver->reset();
    }
}

}  // namespace pdr::sim
