// The prefill's KV over the transfer core: it holds a leg's blocks and fills them with the
// request's bytes; in push mode (docs/protocols.md, "Push mode") it writes them into the blocks
// a decode registered, once both its prefill ended and the Register came (either order), and
// obeys Abort. Runs on pdsim's strand.
#include "net/common/log.hpp"
#include "sim/kv_pattern.hpp"
#include "sim/sim_impl.hpp"

namespace pdr::sim {

using nlohmann::json;

namespace {

int blocks_for(int tokens, int block_size) {
    return (tokens + block_size - 1) / block_size;
}

// Register's block_ranges ([[first, count], ...]) as block ids; false when malformed or past
// `limit` blocks in all.
bool expand_ranges(const json& ranges, std::size_t limit, std::vector<std::uint32_t>& out) {
    if (!ranges.is_array()) {
        return false;
    }
    for (const auto& r : ranges) {
        if (!r.is_array() || r.size() != 2 || !r[0].is_number_unsigned() ||
            !r[1].is_number_unsigned()) {
            return false;
        }
        const auto first = r[0].get<std::uint64_t>();
        const auto count = r[1].get<std::uint64_t>();
        if (count == 0 || count > limit - out.size() || first + count > 0xffffffffULL) {
            return false;
        }
        for (std::uint64_t i = 0; i < count; ++i) {
            out.push_back(static_cast<std::uint32_t>(first + i));
        }
    }
    return !out.empty();
}

constexpr std::size_t kMaxRegisteredBlocks = 1 << 20;

}  // namespace

json SimServer::Impl::prefill_hold(const std::string& rid, int prompt_tokens,
                                   const json& leg_params, const std::optional<Fault>& f) {
    const auto lease = std::chrono::duration_cast<Clock::duration>(
        std::chrono::duration<double>(cfg.kv_lease_seconds));
    KvHandle h;
    h.engine_id = cfg.engine_id;
    h.request_id = rid;
    h.host = cfg.kv_host.empty() ? cfg.host : cfg.kv_host;
    h.port = cfg.port;
    h.num_tokens = prompt_tokens;
    const int n = blocks_for(prompt_tokens, cfg.block_size_tokens);
    h.block_ids = store.hold(rid, n, Clock::now() + lease);
    if (h.block_ids.empty() && n > 0) {
        ++state.counters.kv_pool_refusals;
        return json();
    }
    if (f && f->kv_answer_push) {
        return push_answer_json(h, "xfer-fault-" + rid);  // the blocks stay held until the lease
    }
    if (!agent) {
        return kv_handle_json(h);
    }
    for (std::size_t i = 0; i < h.block_ids.size(); ++i) {
        fill_kv_block(agent->block(static_cast<std::uint32_t>(h.block_ids[i])), rid,
                      static_cast<std::uint32_t>(i));
    }
    if (f && f->kv_corrupt_block && !h.block_ids.empty()) {
        auto b = agent->block(static_cast<std::uint32_t>(h.block_ids[h.block_ids.size() / 2]));
        b[b.size() / 2] ^= std::byte{0x5a};
    }
    h.agent_instance = agent->instance();
    h.layout = agent->layout();
    pdx::PeerHandle control = pdx::kNoPeer;
    if (const std::string ctl = string_param(leg_params, "pdx_control"); !ctl.empty()) {
        auto added = agent->control_peer(ctl);
        if (added) {
            control = *added;
        } else {
            PDR_WARN("pdsim", "pdx_control refused: " + added.message(), rid);
            state.add_violation("prefill request: kv_transfer_params.pdx_control refused: " +
                                added.message());
        }
    }
    if (cfg.kv_mode != KvMode::Push || (f && f->kv_answer_pull)) {
        return kv_handle_json(h);
    }
    const std::string tid = string_param(leg_params, "transfer_id");
    if (tid.empty()) {
        state.add_violation("push prefill request: kv_transfer_params.transfer_id is missing");
        return kv_handle_json(h);
    }
    auto [it, fresh] = pushes.try_emplace(tid);
    PushEntry& e = it->second;
    e.control = control;
    e.write_delay_ms = f ? f->kv_write_delay_ms : 0;
    e.failed_to_router_only = f && f->kv_failed_to_router_only;
    if (fresh) {
        e.stage = PushEntry::Stage::Prefilled;
        e.request_id = rid;
    } else if (e.stage == PushEntry::Stage::Aborted) {
        store.release(rid);  // the router gave up on it already
    } else if (e.stage == PushEntry::Stage::Registered) {
        e.request_id = rid;
        e.stage = PushEntry::Stage::Writing;
        try_write(tid);
    }
    return push_answer_json(h, tid);
}

void SimServer::Impl::on_register(const pdx::ReceivedNotification& n, const json& p) {
    (void)n;
    PushRegistration reg;
    reg.engine_id = p.value("engine_id", std::string());
    reg.host = p.value("host", std::string());
    const json port = p.value("port", json());
    const json layout = p.value("layout", json());
    if (reg.engine_id.empty() || reg.host.empty() || !port.is_number_unsigned() ||
        port.get<std::uint64_t>() < 1 || port.get<std::uint64_t>() > 65535 ||
        !layout.is_number_unsigned() ||
        !expand_ranges(p.value("block_ranges", json()), kMaxRegisteredBlocks, reg.blocks)) {
        ++state.counters.kv_notes_malformed;
        return;
    }
    reg.port = port.get<unsigned short>();
    reg.layout = layout.get<pdx::LayoutId>();
    net::co_spawn(ex,
                  accept_register(p["transfer_id"].get<std::string>(), std::move(reg),
                                  p.value("request_id", std::string())),
                  net::detached);
}

awaitable<void> SimServer::Impl::accept_register(std::string tid, PushRegistration reg,
                                                 std::string request_id) {
    auto self = shared_from_this();
    PeerRef peer = co_await agent->peer_at(client, reg.host, reg.port);
    if (peer.handle == pdx::kNoPeer || peer.name != reg.engine_id) {
        // No way to answer a decode we cannot reach: its own bound ends its wait.
        PDR_WARN("pdsim",
                 "Register of " + tid + " refused: " +
                     (peer.error.empty() ? "side channel serves " + peer.name : peer.error),
                 request_id);
        ++state.counters.kv_notes_malformed;
        co_return;
    }
    reg.peer = peer.handle;
    ++state.counters.kv_registers;
    auto [it, fresh] = pushes.try_emplace(tid);
    PushEntry& e = it->second;
    if (fresh) {
        ++state.counters.kv_early_registers;
        e.stage = PushEntry::Stage::Registered;
        e.request_id = request_id;
        e.reg = std::move(reg);
        e.expires = Clock::now() + cfg.kv_wait_timeout;
        co_return;
    }
    switch (e.stage) {
        case PushEntry::Stage::Registered:  // a repeated Register replaces the first
            e.reg = std::move(reg);
            break;
        case PushEntry::Stage::Prefilled:
            e.reg = std::move(reg);
            e.stage = PushEntry::Stage::Writing;
            try_write(tid);
            break;
        case PushEntry::Stage::Writing:
            ++state.counters.kv_notes_unknown;
            break;
        case PushEntry::Stage::Aborted:
            send_note(reg.peer, pdx::NotifyKind::Failed, pdx_id(tid),
                      json{{"transfer_id", tid},
                           {"request_id", e.request_id},
                           {"error", "the transfer was aborted"}});
            // Kept: D's own Abort may still come (its client left as this Failed crossed it),
            // and D keeps its blocks out of its pool until that Abort is answered too. For a
            // TTL from now: the mark's first TTL (from the router's Abort) may be nearly gone.
            e.reg = std::move(reg);
            e.expires = Clock::now() + cfg.kv_wait_timeout;
            break;
    }
}

void SimServer::Impl::on_abort(const std::string& rid, const std::string& tid) {
    // With a transfer id, only that dispatch's blocks: a retry under a new transfer id that
    // holds the request's blocks now keeps them.
    bool other_dispatch = false;
    for (const auto& [key, e] : pushes) {
        other_dispatch =
            other_dispatch ||
            (!tid.empty() && key != tid && e.request_id == rid &&
             (e.stage == PushEntry::Stage::Prefilled || e.stage == PushEntry::Stage::Writing));
    }
    const bool freed = !other_dispatch && store.release(rid);  // at once: freed_by_abort
    bool known = freed || other_dispatch;
    const auto ttl = Clock::now() + cfg.kv_wait_timeout;
    for (auto& [key, e] : pushes) {
        if (e.request_id != rid || (!tid.empty() && key != tid)) {
            continue;
        }
        known = true;
        if (e.stage == PushEntry::Stage::Writing &&
            agent->agent().cancel_transfer_id(pdx_id(key)).ok()) {
            continue;  // push_write ends it: the core sends D Failed, the control peer a copy
        }
        // Every Abort is answered (a second one too: the decode that sent it keeps its blocks
        // out of its pool until this Failed says nothing will land).
        if (e.reg) {
            send_note(e.reg->peer, pdx::NotifyKind::Failed, pdx_id(key),
                      json{{"transfer_id", key},
                           {"request_id", rid},
                           {"error", "the transfer was aborted"}});
        }
        e.stage = PushEntry::Stage::Aborted;
        e.expires = ttl;
    }
    if (!tid.empty() && !pushes.count(tid)) {  // an Abort that beat the prefill and Register
        PushEntry& e = pushes[tid];
        e.stage = PushEntry::Stage::Aborted;
        e.request_id = rid;
        e.expires = ttl;
    }
    ++(known ? state.counters.kv_aborts : state.counters.kv_notes_unknown);
}

void SimServer::Impl::try_write(const std::string& transfer_id) {
    net::co_spawn(ex, push_write(transfer_id), net::detached);
}

awaitable<void> SimServer::Impl::push_write(std::string tid) {
    auto self = shared_from_this();
    auto it = pushes.find(tid);
    if (it != pushes.end() && it->second.write_delay_ms > 0) {
        Timer t(ex);
        t.expires_after(Duration{it->second.write_delay_ms});
        co_await t.async_wait();
        it = pushes.find(tid);
    }
    if (it == pushes.end() || it->second.stage != PushEntry::Stage::Writing || !it->second.reg) {
        co_return;  // aborted meanwhile (D was told)
    }
    const std::string rid = it->second.request_id;
    const PushRegistration reg = *it->second.reg;
    const pdx::PeerHandle control = it->second.control;
    const bool router_only = it->second.failed_to_router_only;
    const auto* held = store.blocks_of(rid);
    pdx::TransferResult r;
    if (router_only) {
        r.status = pdx::Status::Failed;
        r.message = "fault kv_failed_to_router_only: the write was not made";
    } else if (!held || held->size() != reg.blocks.size()) {
        r.status = pdx::Status::Invalid;
        r.message = held ? "the decode registered " + std::to_string(reg.blocks.size()) +
                               " blocks for " + std::to_string(held->size())
                         : "the prefill's blocks are gone (lease expired)";
    } else {
        const std::vector<std::uint32_t> local(held->begin(), held->end());
        const std::uint64_t bytes = local.size() * cfg.block_bytes;
        pdx::TransferRequest req;
        req.peer = reg.peer;
        req.local_layout = agent->layout();
        req.local_ids = local;
        req.remote_layout = reg.layout;
        req.remote_ids = reg.blocks;
        req.transfer_id = pdx_id(tid);
        req.deadline = pdx::deadline_after(cfg.kv_wait_timeout);
        pdx::Notification done;
        done.kind = pdx::NotifyKind::Done;
        done.transfer_id = req.transfer_id;
        done.payload = dump_json(json{
            {"transfer_id", tid}, {"request_id", rid}, {"blocks", local.size()}, {"bytes", bytes}});
        req.notify = std::move(done);
        const auto started = Clock::now();
        r = co_await agent->transfer(std::move(req), pdx::Direction::Write);
        if (r.status == pdx::Status::Ok) {
            count_transfer(state.counters, bytes, started);
        }
    }
    const bool ok = r.status == pdx::Status::Ok;
    if (ok) {
        store.release_consumed(rid);
        ++state.counters.kv_push_writes;
    } else {
        store.release(rid);
        ++state.counters.kv_push_write_failures;
        PDR_WARN("pdsim",
                 "push write " + tid + " ended " + pdx::to_string(r.status) + ": " + r.message,
                 rid);
        if (r.handle == pdx::kNoTransfer &&
            !router_only) {  // never posted: the core sends D nothing
            send_note(reg.peer, pdx::NotifyKind::Failed, pdx_id(tid),
                      json{{"transfer_id", tid}, {"request_id", rid}, {"error", r.message}});
        }
    }
    if (control != pdx::kNoPeer) {
        json copy{{"transfer_id", tid}, {"request_id", rid}, {"bytes", ok ? r.bytes : 0}};
        if (!ok) {
            copy["error"] = std::string(pdx::to_string(r.status)) + ": " + r.message;
        }
        if (send_note(control, ok ? pdx::NotifyKind::Done : pdx::NotifyKind::Failed, pdx_id(tid),
                      copy)) {
            ++state.counters.kv_control_copies;
        }
    }
    if (auto kept = pushes.find(tid); router_only && kept != pushes.end()) {
        // Kept as aborted: D's Abort (its leg ended by the router) is answered with Failed, so
        // its blocks come back at once.
        kept->second.stage = PushEntry::Stage::Aborted;
        kept->second.expires = Clock::now() + cfg.kv_wait_timeout;
        co_return;
    }
    pushes.erase(tid);
}

}  // namespace pdr::sim
