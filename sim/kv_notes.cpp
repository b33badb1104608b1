// The transfer core's side of pdsim: the agent's start, the notes it receives (docs/protocols.md,
// "pdx engines": Done, Register, Abort, Heartbeat from the prefill's side; Done and Failed from
// the decode's), peer losses, and the state shown in /debug/state.
#include "net/common/json_limits.hpp"
#include "net/common/log.hpp"
#include "sim/kv_pattern.hpp"
#include "sim/sim_impl.hpp"

namespace pdr::sim {

using nlohmann::json;

namespace {

// The payload as a JSON object, or null.
json payload_of(const pdx::Notification& n) {
    json j = parse_untrusted_json(n.payload);
    return j.is_object() ? j : json();
}

// The string at `key` when the payload has one ("" otherwise).
std::string str(const json& j, const char* key) {
    auto it = j.find(key);
    return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

}  // namespace

void SimServer::Impl::kv_start() {
    if (cfg.kv_transfer != KvTransfer::Pdx) {
        return;
    }
    KvAgentConfig c;
    c.name = cfg.engine_id;
    c.transports = cfg.kv_transports;
    c.net_devices = cfg.kv_net_devices;
    c.block_bytes = cfg.block_bytes;
    c.blocks = cfg.kv_blocks;
    agent = std::make_unique<KvAgent>(ex, c);
    std::weak_ptr<Impl> weak = shared_from_this();
    agent->set_note_handler([weak](const pdx::ReceivedNotification& n) {
        if (auto self = weak.lock()) {
            self->on_note(n);
        }
    });
    agent->set_peer_gone_handler([weak](const pdx::PeerEvent& e) {
        if (auto self = weak.lock()) {
            self->on_peer_gone(e);
        }
    });
    // A freed block is scrubbed: reading it later fails verification instead of finding the
    // bytes of the request that held it.
    store.set_free_hook([this](std::uint32_t id) { scrub_kv_block(agent->block(id)); });
}

bool SimServer::Impl::send_note(pdx::PeerHandle peer, pdx::NotifyKind kind, std::uint64_t id,
                                const json& payload) {
    pdx::Notification n;
    n.kind = kind;
    n.transfer_id = id;
    n.payload = dump_json(payload);
    auto r = agent->agent().notify(peer, n);
    if (!r) {
        PDR_WARN("pdsim", "note to peer " + std::to_string(peer) + " not sent: " + r.message());
    }
    return r.ok();
}

void SimServer::Impl::on_note(const pdx::ReceivedNotification& rn) {
    const pdx::Notification& n = rn.notification;
    Counters& c = state.counters;
    const json p = payload_of(n);
    // A note names its request or transfer twice: the 64-bit id and the payload's string.
    auto id_matches = [&](const std::string& s) {
        return !s.empty() && pdx_id(s) == n.transfer_id;
    };
    const bool prefill = cfg.role == Role::Prefill;
    switch (n.kind) {
        case pdx::NotifyKind::Done:
            if (prefill) {  // pull: D read and verified the blocks
                const std::string rid = str(p, "request_id");
                if (!id_matches(rid)) {
                    ++c.kv_notes_malformed;
                } else if (store.release_consumed(rid)) {
                    ++c.kv_done_notes;
                } else {
                    ++c.kv_notes_unknown;
                }
                return;
            }
            [[fallthrough]];
        case pdx::NotifyKind::Failed: {
            if (prefill) {
                ++c.kv_notes_unknown;
                return;
            }
            auto it = waits.find(n.transfer_id);
            if (it == waits.end()) {
                // P's last word on a push this decode gave up on: its blocks are safe again.
                if (auto q = quarantine.find(n.transfer_id); q != quarantine.end()) {
                    store.give(q->second.ids);
                    quarantine.erase(q);
                } else {
                    ++c.kv_notes_unknown;
                }
                return;
            }
            // The core's own Failed (a write that ended otherwise) carries no payload.
            const bool bare_failure = n.kind == pdx::NotifyKind::Failed && n.payload.empty();
            if (!bare_failure && str(p, "transfer_id") != it->second->transfer_id) {
                ++c.kv_notes_malformed;
                return;
            }
            PushOutcome o;
            o.done = n.kind == pdx::NotifyKind::Done;
            if (!o.done) {
                const std::string why = str(p, "error");
                o.error = why.empty() ? std::string("transfer ") + pdx::to_string(n.status) : why;
            }
            it->second->signal.fire(std::move(o));
            return;
        }
        case pdx::NotifyKind::Register:
            if (!prefill || p.is_null() || !id_matches(str(p, "transfer_id"))) {
                ++(prefill ? c.kv_notes_malformed : c.kv_notes_unknown);
                return;
            }
            on_register(rn, p);
            return;
        case pdx::NotifyKind::Abort: {
            const std::string rid = str(p, "request_id");
            if (!prefill || !id_matches(rid)) {
                ++(prefill ? c.kv_notes_malformed : c.kv_notes_unknown);
                return;
            }
            on_abort(rid, str(p, "transfer_id"));
            return;
        }
        case pdx::NotifyKind::Heartbeat: {
            auto ids = p.is_null() ? json() : p.value("request_ids", json());
            if (!prefill || n.transfer_id != 0 || !ids.is_array()) {
                ++(prefill ? c.kv_notes_malformed : c.kv_notes_unknown);
                return;
            }
            ++c.kv_heartbeats;
            const auto expiry =
                Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                   std::chrono::duration<double>(cfg.kv_lease_seconds));
            for (const auto& id : ids) {
                if (id.is_string() && store.refresh(id.get<std::string>(), expiry)) {
                    ++c.lease_refreshes;
                } else {
                    ++c.lease_refresh_unknown;
                }
            }
            return;
        }
    }
    ++c.kv_notes_unknown;
}

void SimServer::Impl::on_peer_gone(const pdx::PeerEvent& e) {
    PDR_INFO("pdsim", "transfer peer " + e.name + " gone: " + e.message);
    for (auto& [id, w] : waits) {
        if (w->peer == e.peer) {
            w->signal.fire(PushOutcome{false, "prefill " + e.name + " gone: " + e.message});
        }
    }
}

void SimServer::Impl::kv_sweep(Clock::time_point now) {
    for (auto it = quarantine.begin(); it != quarantine.end();) {
        if (now >= it->second.until) {
            store.give(it->second.ids);
            it = quarantine.erase(it);
        } else {
            ++it;
        }
    }
    // Registrations whose prefill never came, and Abort marks, end after their TTL; a prefilled
    // entry ends once its blocks are gone (lease expiry, release).
    for (auto it = pushes.begin(); it != pushes.end();) {
        PushEntry& e = it->second;
        const bool stale =
            ((e.stage == PushEntry::Stage::Registered || e.stage == PushEntry::Stage::Aborted) &&
             now >= e.expires) ||
            (e.stage == PushEntry::Stage::Prefilled && !store.holds(e.request_id));
        if (stale && e.stage == PushEntry::Stage::Registered && e.reg) {
            send_note(e.reg->peer, pdx::NotifyKind::Failed, pdx_id(it->first),
                      json{{"transfer_id", it->first},
                           {"request_id", e.request_id},
                           {"error", "the prefill leg never came"}});
        }
        it = stale ? pushes.erase(it) : std::next(it);
    }
}

json SimServer::Impl::kv_state_json() const {
    const Counters& c = state.counters;
    json j{{"kv_transfer", agent ? "pdx" : "http"},
           {"kv_blocks", store.capacity()},
           {"kv_blocks_free", store.blocks_free()},
           {"kv_blocks_taken", store.blocks_taken()},
           {"kv_pool_exhausted", store.counters().pool_exhausted},
           {"kv_pool_refusals", c.kv_pool_refusals},
           {"kv_blocks_verified", c.kv_blocks_verified},
           {"kv_bytes_verified", c.kv_bytes_verified},
           {"kv_verify_failures", c.kv_verify_failures},
           {"kv_notes_malformed", c.kv_notes_malformed},
           {"kv_notes_unknown", c.kv_notes_unknown},
           {"kv_done_notes", c.kv_done_notes},
           {"kv_registers", c.kv_registers},
           {"kv_early_registers", c.kv_early_registers},
           {"kv_push_writes", c.kv_push_writes},
           {"kv_push_write_failures", c.kv_push_write_failures},
           {"kv_aborts", c.kv_aborts},
           {"kv_heartbeats", c.kv_heartbeats},
           {"kv_control_copies", c.kv_control_copies},
           {"kv_push_failed_notes", c.kv_push_failed_notes},
           {"kv_wait_timeouts", c.kv_wait_timeouts},
           {"kv_fault_holds", c.kv_fault_holds},
           {"kv_aborts_sent", c.kv_aborts_sent},
           {"kv_pushes_pending", pushes.size()},
           {"kv_waits_pending", waits.size()},
           {"kv_quarantined", quarantine.size()}};
    if (agent) {
        const auto s = agent->agent().stats();
        j["pdx"] = json{{"instance", agent->instance()},
                        {"descriptor_fetches", agent->descriptor_fetches()},
                        {"peers", s.peers},
                        {"peers_gone", s.peers_gone},
                        {"bytes_written", s.bytes_written},
                        {"bytes_read", s.bytes_read},
                        {"transfers_ok", s.transfers_ok},
                        {"transfers_failed", s.transfers_failed + s.transfers_peer_gone +
                                                 s.transfers_expired + s.transfers_canceled},
                        {"notifications_sent", s.notifications_sent},
                        {"notifications_received", s.notifications_received}};
    }
    return j;
}

}  // namespace pdr::sim
