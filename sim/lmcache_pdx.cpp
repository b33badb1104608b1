// LMCache mode over the transfer core (docs/pdsim.md, "LMCache mode"): per decode rank, P sends a
// payload-less KV frame on the rank's alloc port; D takes blocks from its pool and answers them
// with its agent descriptor and a transfer id; P writes the KV into them through its agent with a
// Done note; D verifies every byte on the Done, records the copy and acks, and only then does P
// go on to notify the router. Runs on pdsim's strand.
#include "net/common/log.hpp"
#include "sim/kv_link.hpp"
#include "sim/kv_pattern.hpp"
#include "sim/kv_sender.hpp"
#include "sim/lmcache_wire.hpp"
#include "sim/sim_impl.hpp"

#include <array>

namespace pdr::sim {

using nlohmann::json;

namespace {

constexpr Duration kQuarantine{5000};  // blocks of a write D gave up on stay out of the pool

std::size_t blocks_for_bytes(std::uint64_t bytes, std::size_t block_bytes) {
    return static_cast<std::size_t>((bytes + block_bytes - 1) / block_bytes);
}

std::span<unsigned char> as_uchars(std::span<std::byte> b) {
    return {reinterpret_cast<unsigned char*>(b.data()), b.size()};
}

// Calls fn(block index, block bytes used, offset in the KV) for each block the KV spans.
template <class Fn>
void for_each_slice(const KvPattern& pattern, std::size_t block_bytes, std::size_t blocks,
                    Fn&& fn) {
    for (std::size_t i = 0; i < blocks; ++i) {
        const std::uint64_t off = std::uint64_t{i} * block_bytes;
        const auto n =
            static_cast<std::size_t>(std::min<std::uint64_t>(block_bytes, pattern.size() - off));
        if (!fn(i, n, off)) {
            return;
        }
    }
}

}  // namespace

awaitable<std::string> SimServer::Impl::lmcache_write(KvTarget t, KvShipment kv, Duration timeout) {
    auto self = shared_from_this();
    const std::uint64_t bytes = std::uint64_t{kv.tokens} * kv.bytes_per_token;
    const KvPattern pattern(kv.key, t.rank, kv.tokens, kv.block_tokens, kv.bytes_per_token);
    // Our own blocks first: a prefill that cannot hold the KV does not make D allocate.
    TakenBlocks local;
    const std::size_t n = blocks_for_bytes(bytes, cfg.block_bytes);
    auto ids = store.take(n);
    if (!ids) {
        ++state.counters.kv_pool_refusals;
        co_return "KV pool exhausted: the copy for " + kv_target_where(t, t.alloc_port) +
            " needs " + std::to_string(n) + " blocks, " + std::to_string(store.blocks_free()) +
            " are free";
    }
    local.store = &store;
    local.ids = std::move(*ids);
    for_each_slice(pattern, cfg.block_bytes, n,
                   [&](std::size_t i, std::size_t len, std::uint64_t off) {
                       pattern.fill(off, as_uchars(agent->block(local.ids[i])).first(len));
                       return true;
                   });
    if (kv.corrupt) {  // fault: one byte in the middle of the KV
        const std::uint64_t at = bytes / 2;
        agent->block(local.ids[at / cfg.block_bytes])[at % cfg.block_bytes] ^= std::byte{0x5a};
    }

    const std::string refused = co_await kv_handshake(t, timeout);
    if (!refused.empty()) {
        co_return refused;
    }
    KvLink link(Socket(ex), timeout);
    const std::string err = co_await KvLink::connect(link, t.host, t.alloc_port);
    if (!err.empty()) {
        co_return "KV receiver " + kv_target_where(t, t.alloc_port) + ": " + err;
    }
    const KvHeader h = kv_frame_header(t, kv, true);
    const std::string head = encode_kv_header(h);
    auto ec = co_await link.write(
        std::span(reinterpret_cast<const unsigned char*>(head.data()), head.size()));
    std::array<unsigned char, kAllocFixedSize> fixed{};
    if (!ec) {
        ec = co_await link.read(fixed);
    }
    if (ec) {
        co_return "KV receiver " + kv_target_where(t, t.alloc_port) +
            ": no block allocation: " + link.describe(ec);
    }
    KvAlloc a;
    std::size_t tail = 0;
    if (auto bad = decode_kv_alloc_fixed(fixed, a, tail)) {
        co_return "KV receiver " + kv_target_where(t, t.alloc_port) + ": " + *bad;
    }
    if (a.status != KvStatus::Ok) {
        co_return "KV receiver " + kv_target_where(t, t.alloc_port) +
            " refused the KV: " + std::string(to_string(a.status));
    }
    std::vector<unsigned char> rest(tail);
    ec = co_await link.read(rest);
    if (ec) {
        co_return "KV receiver " + kv_target_where(t, t.alloc_port) +
            ": block allocation cut short: " + link.describe(ec);
    }
    decode_kv_alloc_tail(rest, a);
    if (a.block_bytes != cfg.block_bytes || a.blocks.size() != n) {
        co_return "KV receiver " + kv_target_where(t, t.alloc_port) + " allocated " +
            std::to_string(a.blocks.size()) + " blocks of " + std::to_string(a.block_bytes) +
            " bytes for " + std::to_string(n) + " of " + std::to_string(cfg.block_bytes) +
            " (--kv-block-bytes must be the same on prefill and decode)";
    }
    auto peer = agent->peer_from(a.descriptor);
    if (!peer) {
        co_return "KV receiver " + kv_target_where(t, t.alloc_port) +
            ": its transfer agent was refused: " + peer.message();
    }
    pdx::TransferRequest req;
    req.peer = *peer;
    req.local_layout = agent->layout();
    req.local_ids = local.ids;
    req.remote_layout = a.layout;
    req.remote_ids = a.blocks;
    req.transfer_id = pdx_id(a.transfer_id);
    req.deadline = pdx::deadline_after(timeout);
    pdx::Notification done;
    done.kind = pdx::NotifyKind::Done;
    done.transfer_id = req.transfer_id;
    done.payload = dump_json(json{{"transfer_id", a.transfer_id},
                                  {"request_id", kv.req_id},
                                  {"blocks", n},
                                  {"bytes", bytes}});
    req.notify = std::move(done);
    const auto started = Clock::now();
    const pdx::TransferResult r = co_await agent->transfer(std::move(req), pdx::Direction::Write);
    if (r.status == pdx::Status::Ok) {
        count_transfer(state.counters, bytes, started);  // the agent's write alone
    }
    if (r.status != pdx::Status::Ok) {
        if (r.handle == pdx::kNoTransfer) {  // never posted: the core sends D nothing
            send_note(*peer, pdx::NotifyKind::Failed, pdx_id(a.transfer_id),
                      json{{"transfer_id", a.transfer_id},
                           {"request_id", kv.req_id},
                           {"error", r.message}});
        }
        co_return "KV write to " + kv_target_where(t, t.alloc_port) +
            " through the transfer core ended " + std::string(pdx::to_string(r.status)) + ": " +
            r.message;
    }
    std::array<unsigned char, kAckSize> ack{};
    ec = co_await link.read(ack);
    link.close();
    co_return kv_ack_error(t, ec, link.describe(ec), ack, kv.corrupt);
}

awaitable<bool> SimServer::Impl::lmcache_accept(KvLink& link, KvHeader h) {
    auto self = shared_from_this();
    const std::string where = "rank " + std::to_string(h.rank) + " (request " + h.req_id + ")";
    KvAlloc a;
    a.rank = h.rank;
    const std::size_t n = blocks_for_bytes(h.bytes, cfg.block_bytes);
    TakenBlocks taken;
    if (auto ids = store.take(n)) {
        taken.store = &store;
        taken.ids = std::move(*ids);
    } else {
        ++state.counters.kv_pool_refusals;
        PDR_WARN("pdsim", "lmcache: KV for " + where + " refused: it needs " + std::to_string(n) +
                              " blocks, " + std::to_string(store.blocks_free()) + " are free");
        a.status = KvStatus::NoBlocks;
        const std::string out = encode_kv_alloc(a);
        co_await link.write(
            std::span(reinterpret_cast<const unsigned char*>(out.data()), out.size()));
        co_return false;
    }
    const std::string tid = "lmcache-" + cfg.engine_id + "-" + std::to_string(++lmcache_transfers);
    auto w = std::make_shared<PushWait>(ex);
    w->transfer_id = tid;
    w->request_id = h.req_id;
    waits[pdx_id(tid)] = w;
    a.layout = agent->layout();
    a.block_bytes = static_cast<std::uint32_t>(cfg.block_bytes);
    a.blocks = taken.ids;
    a.transfer_id = tid;
    a.descriptor.assign(reinterpret_cast<const char*>(agent->descriptor().data()),
                        agent->descriptor().size());
    const std::string out = encode_kv_alloc(a);
    auto ec = co_await link.write(
        std::span(reinterpret_cast<const unsigned char*>(out.data()), out.size()));
    if (!ec) {
        co_await wait_signal(w->signal, Clock::now() + cfg.kv_wait_timeout, false);
    }
    waits.erase(pdx_id(tid));
    KvStatus status = KvStatus::Ok;
    if (!w->signal.value) {
        // P may still write: keep the blocks out of the pool until its last word or a bound.
        ++state.counters.kv_wait_timeouts;
        quarantine[pdx_id(tid)] = Quarantined{std::move(taken.ids), Clock::now() + kQuarantine};
        taken.store = nullptr;
        PDR_WARN("pdsim",
                 "lmcache: no Done for the KV of " + where + (ec ? " (link lost)" : " in time"));
        status = KvStatus::WriteFailed;
    } else if (!w->signal.value->done) {
        ++state.counters.kv_push_failed_notes;
        PDR_WARN("pdsim",
                 "lmcache: the KV write for " + where + " failed: " + w->signal.value->error);
        status = KvStatus::WriteFailed;
    } else {
        const KvPattern pattern(h.key, h.rank, h.tokens, h.block_tokens, h.bytes_per_token);
        bool corrupt = false;
        for_each_slice(
            pattern, cfg.block_bytes, n, [&](std::size_t i, std::size_t len, std::uint64_t off) {
                if (!pattern.matches(off, as_uchars(agent->block(taken.ids[i])).first(len))) {
                    corrupt = true;
                    PDR_WARN("pdsim",
                             "lmcache: KV block " + std::to_string(i) + " of " + std::to_string(n) +
                                 " for " + where +
                                 " failed verification (wrong or stale bytes; not served)");
                    return false;
                }
                return true;
            });
        if (corrupt) {
            ++state.counters.kv_verify_failures;
            status = KvStatus::Corrupt;
        } else {
            state.counters.kv_blocks_verified += n;
            state.counters.kv_bytes_verified += h.bytes;
        }
        receiver->inbox().add(KvCopy{h.key, h.rank, h.tokens, h.bytes, corrupt, h.req_id},
                              Clock::now());
    }
    const auto ack = encode_ack(KvAck{h.rank, status});
    ec = co_await link.write(ack);
    co_return !ec && status != KvStatus::WriteFailed;
}

}  // namespace pdr::sim
