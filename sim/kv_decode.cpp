// The decode's KV: it reads the blocks a pull handle names (over the transfer core, or the
// emulated HTTP read), or in push mode registers blocks of its own with the prefill and waits
// for its write; either way it checks every word before it generates, so wrong or stale bytes
// end the request with an error and a counter, never with tokens.
#include "net/common/json_limits.hpp"
#include "net/common/log.hpp"
#include "sim/kv_pattern.hpp"
#include "sim/sim_impl.hpp"

namespace pdr::sim {

using nlohmann::json;

namespace {

constexpr Duration kReadDeadline{10000};
constexpr Duration kQuarantine{5000};

KvOutcome failed(std::string message, http::status status = http::status::internal_server_error) {
    KvOutcome o;
    o.status = status;
    o.message = std::move(message);
    return o;
}

std::string authority(const std::string& host, unsigned short port) {
    return upstream::Endpoint{host, port}.authority();
}

}  // namespace

KvOutcome SimServer::Impl::verify_blocks(const std::string& request_id, const TakenBlocks& taken,
                                         const std::string& from) {
    for (std::size_t i = 0; i < taken.ids.size(); ++i) {
        const auto bad =
            check_kv_block(agent->block(taken.ids[i]), request_id, static_cast<std::uint32_t>(i));
        if (bad >= 0) {
            ++state.counters.kv_verify_failures;
            return failed("KV block " + std::to_string(i) + " of " +
                          std::to_string(taken.ids.size()) + " from prefill " + from +
                          " failed verification at byte " + std::to_string(bad) +
                          " (wrong or stale bytes; not served)");
        }
    }
    state.counters.kv_blocks_verified += taken.ids.size();
    state.counters.kv_bytes_verified += taken.ids.size() * cfg.block_bytes;
    return {};
}

// Takes `n` blocks from the pool into `taken`, or says why not.
static std::optional<KvOutcome> take_blocks(BlockStore& store, Counters& c, std::size_t n,
                                            TakenBlocks& taken) {
    auto ids = store.take(n);
    if (!ids) {
        ++c.kv_pool_refusals;
        return failed("KV pool exhausted: the request needs " + std::to_string(n) + " blocks, " +
                          std::to_string(store.blocks_free()) + " of " +
                          std::to_string(store.capacity()) + " are free",
                      http::status::service_unavailable);
    }
    taken.store = &store;
    taken.ids = std::move(*ids);
    return std::nullopt;
}

awaitable<KvOutcome> SimServer::Impl::pull_pdx(const KvHandle& h, TakenBlocks& taken) {
    auto self = shared_from_this();
    const std::string from = authority(h.host, h.port);
    for (const auto id : h.block_ids) {
        if (id < 0 || id > 0xffffffffLL) {
            co_return failed("kv_transfer_params.remote_block_ids holds " + std::to_string(id) +
                                 ", not a block id",
                             http::status::bad_request);
        }
    }
    if (auto refused = take_blocks(store, state.counters, h.block_ids.size(), taken)) {
        co_return *refused;
    }
    const std::vector<std::uint32_t> remote(h.block_ids.begin(), h.block_ids.end());
    // A second try only after the first found the peer's handle gone (e.g. it timed out while
    // idle, or the prefill restarted): the descriptor is fetched again.
    for (int attempt = 0; attempt < 2; ++attempt) {
        PeerRef peer = co_await agent->peer_at(client, h.host, h.port, attempt > 0);
        if (peer.handle == pdx::kNoPeer) {
            ++state.counters.kv_read_failures;
            co_return failed("KV blocks could not be read from prefill " + from + ": " +
                             peer.error);
        }
        if (peer.name != h.engine_id) {
            ++state.counters.kv_read_failures;
            co_return failed("KV side channel " + from + " serves engine " + peer.name + ", not " +
                             h.engine_id);
        }
        if (h.agent_instance != 0 && peer.instance != h.agent_instance) {
            if (attempt == 0) {
                continue;  // maybe a cached older generation: ask again
            }
            ++state.counters.kv_read_failures;
            co_return failed("KV blocks of prefill " + from +
                             " belong to a previous generation of its agent (it restarted); "
                             "not served");
        }
        pdx::TransferRequest req;
        req.peer = peer.handle;
        req.local_layout = agent->layout();
        req.local_ids = taken.ids;
        req.remote_layout = h.layout;
        req.remote_ids = remote;
        req.transfer_id = pdx_id(h.request_id);
        req.deadline = pdx::deadline_after(kReadDeadline);
        const auto started = Clock::now();
        const pdx::TransferResult r =
            co_await agent->transfer(std::move(req), pdx::Direction::Read);
        if (r.status == pdx::Status::Ok) {
            count_transfer(state.counters, taken.ids.size() * cfg.block_bytes, started);
        }
        if (r.status == pdx::Status::PeerGone && attempt == 0) {
            continue;
        }
        KvOutcome v;
        if (r.status != pdx::Status::Ok) {
            ++state.counters.kv_read_failures;
            v = failed("KV read from prefill " + from + " failed: " + pdx::to_string(r.status) +
                       ": " + r.message);
        } else {
            v = verify_blocks(h.request_id, taken, from);
        }
        // P frees the blocks: read (Done, freed_by_read) or useless (Abort, freed_by_abort).
        const pdx::NotifyKind kind = v.ok() ? pdx::NotifyKind::Done : pdx::NotifyKind::Abort;
        if (!v.ok()) {
            ++state.counters.kv_aborts_sent;
        }
        const json note{{"request_id", h.request_id}};
        if (!send_note(peer.handle, kind, pdx_id(h.request_id), note)) {
            // P never adds a pulling D back, so D's handle is declared gone peer_timeout after
            // its add_peer, possibly between the read and this note: once more on a fresh
            // handle to the same agent instance. If that fails too, P's lease frees the blocks.
            PeerRef again = co_await agent->peer_at(client, h.host, h.port, true);
            if (again.handle != pdx::kNoPeer && again.instance == peer.instance) {
                send_note(again.handle, kind, pdx_id(h.request_id), note);
            }
        }
        co_return v;
    }
    ++state.counters.kv_read_failures;
    co_return failed("KV read from prefill " + from + " failed: peer gone twice");
}

awaitable<KvOutcome> SimServer::Impl::push_receive(server::Exchange& x, const PushParams& p,
                                                   int blocks, int register_delay_ms,
                                                   int hold_after_ms, TakenBlocks& taken) {
    auto self = shared_from_this();
    const std::string from = authority(p.host, p.port);
    const std::uint64_t key = pdx_id(p.transfer_id);
    if (waits.count(key)) {
        co_return failed("transfer_id " + p.transfer_id + " is already waiting on this decode",
                         http::status::bad_request);
    }
    PeerRef peer = co_await agent->peer_at(client, p.host, p.port);
    // The client may have gone while the descriptor was fetched: the request's cancellation
    // came then, and a wait below would not see it again.
    if (x.client_gone()) {
        KvOutcome o;
        o.cancelled = true;
        co_return o;  // nothing taken, nothing registered
    }
    if (peer.handle == pdx::kNoPeer || peer.name != p.engine_id) {
        ++state.counters.kv_read_failures;
        co_return failed("KV push from prefill " + from + " impossible: " +
                         (peer.error.empty() ? "its side channel serves engine " + peer.name +
                                                   ", not " + p.engine_id
                                             : peer.error));
    }
    if (auto refused =
            take_blocks(store, state.counters, static_cast<std::size_t>(blocks), taken)) {
        co_return *refused;
    }
    auto w = std::make_shared<PushWait>(ex);
    w->transfer_id = p.transfer_id;
    w->request_id = p.request_id;
    w->peer = peer.handle;
    waits[key] = w;
    struct Unwait {
        std::unordered_map<std::uint64_t, std::shared_ptr<PushWait>>& waits;
        std::uint64_t key;
        ~Unwait() { waits.erase(key); }
    } unwait{waits, key};
    // Gives up: P is told, and the blocks stay out of the pool until P's answer to the Abort
    // (a write it already posted may still land in them).
    auto abort = [&] {
        ++state.counters.kv_aborts_sent;
        send_note(peer.handle, pdx::NotifyKind::Abort, pdx_id(p.request_id),
                  json{{"request_id", p.request_id}, {"transfer_id", p.transfer_id}});
        quarantine[key] = Quarantined{std::move(taken.ids), Clock::now() + kQuarantine};
        taken.ids.clear();
    };
    if (register_delay_ms > 0) {  // fault: let the prefill finish first
        Timer t(ex);
        t.expires_after(Duration{register_delay_ms});
        co_await t.async_wait();
        if (x.client_gone()) {
            KvOutcome o;
            o.cancelled = true;
            co_return o;  // nothing registered: nothing to abort
        }
    }
    json ranges = json::array();
    for (const auto& [first, count] : to_ranges(taken.ids)) {
        ranges.push_back(json::array({first, count}));
    }
    const json reg{{"transfer_id", p.transfer_id},
                   {"request_id", p.request_id},
                   {"engine_id", cfg.engine_id},
                   {"host", cfg.host},
                   {"port", cfg.port},
                   {"layout", agent->layout()},
                   {"block_ranges", std::move(ranges)}};
    if (!send_note(peer.handle, pdx::NotifyKind::Register, key, reg)) {
        ++state.counters.kv_read_failures;
        co_return failed("could not register KV blocks with prefill " + from);
    }
    const auto end = co_await wait_signal(w->signal, Clock::now() + cfg.kv_wait_timeout, true);
    if (end == WaitEnd::Fired && hold_after_ms > 0) {  // fault: the client may leave meanwhile
        ++state.counters.kv_fault_holds;
        Timer t(ex);
        t.expires_after(Duration{hold_after_ms});
        co_await t.async_wait();
    }
    if (end == WaitEnd::Fired && x.client_gone()) {
        // P's last word (Done, or Failed: nothing was or will be written) came before the
        // client left: nothing more lands in the blocks, which go back now. An Abort here
        // would find P's entry gone and go unanswered, and the blocks would wait out the
        // quarantine.
        KvOutcome o;
        o.cancelled = true;
        co_return o;
    }
    if (end == WaitEnd::Cancelled || x.client_gone()) {
        abort();
        KvOutcome o;
        o.cancelled = true;
        co_return o;
    }
    if (end == WaitEnd::TimedOut) {
        ++state.counters.kv_wait_timeouts;
        abort();
        co_return failed("no KV from prefill " + from + " within " +
                         std::to_string(cfg.kv_wait_timeout.count()) + " ms (transfer " +
                         p.transfer_id + ")");
    }
    if (!w->signal.value->done) {
        ++state.counters.kv_push_failed_notes;
        ++state.counters.kv_read_failures;
        co_return failed("KV push from prefill " + from + " failed: " + w->signal.value->error);
    }
    co_return verify_blocks(p.request_id, taken, from);
}

awaitable<KvOutcome> SimServer::Impl::pull_http(const KvHandle& h) {
    auto self = shared_from_this();
    upstream::Request req{http::verb::post, "/internal/pdsim/kv_read", 11};
    req.set(http::field::content_type, "application/json");
    req.body() = dump_json(json{{"request_id", h.request_id}, {"block_ids", h.block_ids}});
    upstream::Timeouts t;
    t.connect = Duration{2000};
    t.response = Duration{5000};
    const upstream::Endpoint ep{h.host, h.port};
    auto res = co_await client.request(ep, std::move(req), t);
    KvOutcome out;
    if (!res.ok()) {
        out = failed("KV blocks could not be read from prefill " + ep.authority() + ": " +
                     std::string(upstream::to_string(res.failure)));
    } else if (const unsigned status = res.response.result_int(); status == 404) {
        out = failed("KV blocks no longer held by prefill");
    } else if (status != 200) {
        out = failed("KV read from prefill " + ep.authority() + " failed with HTTP " +
                     std::to_string(status));
    } else {
        json b = parse_untrusted_json(res.response.body());
        if (!b.is_object() || !b.contains("blocks") || !b.contains("bytes") ||
            !b.contains("checksum") || !b["blocks"].is_number_unsigned() ||
            !b["bytes"].is_number_unsigned() || !b["checksum"].is_string()) {
            out = failed("KV read from prefill returned an invalid answer");
        } else if (!h.block_ids.empty()) {
            const auto blocks = b["blocks"].get<std::size_t>();
            const auto bytes = b["bytes"].get<std::size_t>();
            if (blocks != h.block_ids.size() || bytes % blocks != 0 ||
                b["checksum"].get<std::string>() !=
                    block_checksum(h.engine_id, h.block_ids, bytes / blocks)) {
                ++state.counters.kv_verify_failures;
                out = failed("KV blocks read from prefill failed verification");
            }
        }
    }
    if (!out.ok()) {
        ++state.counters.kv_read_failures;
    }
    co_return out;
}

}  // namespace pdr::sim
