#include "sim/kv_sender.hpp"

#include "sim/kv_link.hpp"
#include "sim/lmcache_wire.hpp"

#include <algorithm>
#include <array>
#include <vector>

namespace pdr::sim {

namespace {

constexpr std::size_t kChunkBytes = 64 * 1024;

std::string where(const KvTarget& t, unsigned short port) {
    return kv_target_where(t, port);
}

}  // namespace

std::string kv_target_where(const KvTarget& t, unsigned short port) {
    return "rank " + std::to_string(t.rank) + " (" + t.host + ":" + std::to_string(port) + ")";
}

awaitable<std::string> kv_handshake(const KvTarget& t, Duration timeout) {
    const auto ex = co_await net::this_coro::executor;
    KvLink link(Socket(ex), timeout);
    const std::string err = co_await KvLink::connect(link, t.host, t.init_port);
    if (!err.empty()) {
        co_return "KV receiver " + where(t, t.init_port) + ": " + err;
    }
    const auto hello = encode_hello(Hello{t.rank, HelloStatus::Ok});
    auto ec = co_await link.write(hello);
    std::array<unsigned char, kHelloSize> reply{};
    if (!ec) {
        ec = co_await link.read(reply);
    }
    link.close();
    if (ec) {
        co_return "KV receiver " + where(t, t.init_port) +
            ": handshake failed: " + link.describe(ec);
    }
    const auto h = decode_hello(reply);
    if (!h) {
        co_return "KV receiver " + where(t, t.init_port) + ": not a pdsim KV receiver";
    }
    if (h->status != HelloStatus::Ok || h->rank != t.rank) {
        co_return "KV receiver " + where(t, t.init_port) + " is rank " + std::to_string(h->rank);
    }
    co_return std::string();
}

std::string kv_ack_error(const KvTarget& t, const error_code& ec, const std::string& why,
                         std::span<const unsigned char, 8> ack_bytes, bool corrupt) {
    if (ec) {
        return "KV transfer to " + where(t, t.alloc_port) + " failed: " + why;
    }
    const auto ack = decode_ack(ack_bytes);
    if (!ack) {
        return "KV receiver " + where(t, t.alloc_port) + " sent an invalid ack";
    }
    // The corrupting fault emulates a P that does not notice: D's refusal is what it expects.
    if (ack->status != KvStatus::Ok && !(corrupt && ack->status == KvStatus::Corrupt)) {
        return "KV receiver " + where(t, t.alloc_port) +
               " refused the KV: " + std::string(to_string(ack->status));
    }
    return std::string();
}

KvHeader kv_frame_header(const KvTarget& t, const KvShipment& kv, bool pdx) {
    KvHeader h;
    h.rank = t.rank;
    h.key = kv.key;
    h.tokens = kv.tokens;
    h.block_tokens = kv.block_tokens;
    h.bytes_per_token = kv.bytes_per_token;
    h.bytes = std::uint64_t{kv.tokens} * kv.bytes_per_token;
    h.req_id = kv.req_id.substr(0, kMaxReqIdBytes);
    h.pdx = pdx;
    return h;
}

awaitable<std::string> send_kv(KvTarget t, KvShipment kv, Duration timeout) {
    const std::string refused = co_await kv_handshake(t, timeout);
    if (!refused.empty()) {
        co_return refused;
    }
    const auto ex = co_await net::this_coro::executor;
    KvLink link(Socket(ex), timeout);
    const std::string err = co_await KvLink::connect(link, t.host, t.alloc_port);
    if (!err.empty()) {
        co_return "KV receiver " + where(t, t.alloc_port) + ": " + err;
    }
    const KvHeader h = kv_frame_header(t, kv, false);
    const std::string head = encode_kv_header(h);
    auto ec = co_await link.write(
        std::span(reinterpret_cast<const unsigned char*>(head.data()), head.size()));
    const KvPattern pattern(h.key, h.rank, h.tokens, h.block_tokens, h.bytes_per_token);
    std::vector<unsigned char> chunk(static_cast<std::size_t>(
        std::min<std::uint64_t>(kChunkBytes, std::max<std::uint64_t>(h.bytes, 1))));
    const std::uint64_t corrupt_at = kv.corrupt ? h.bytes / 2 : h.bytes;
    for (std::uint64_t off = 0; !ec && off < h.bytes; off += chunk.size()) {
        const auto n =
            static_cast<std::size_t>(std::min<std::uint64_t>(chunk.size(), h.bytes - off));
        const std::span<unsigned char> part(chunk.data(), n);
        pattern.fill(off, part);
        if (corrupt_at >= off && corrupt_at < off + n) {
            part[corrupt_at - off] ^= 0x5a;
        }
        ec = co_await link.write(part);
    }
    std::array<unsigned char, kAckSize> ack_bytes{};
    if (!ec) {
        ec = co_await link.read(ack_bytes);
    }
    link.close();
    co_return kv_ack_error(t, ec, link.describe(ec), ack_bytes, kv.corrupt);
}

}  // namespace pdr::sim
