#include "sim/lmcache_wire.hpp"

#include "sim/generation.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>

namespace pdr::sim {

namespace {

using nlohmann::json;

std::string msgpack(const json& j) {
    const std::vector<std::uint8_t> bytes = json::to_msgpack(j);
    return std::string(bytes.begin(), bytes.end());
}

// Big-endian writer and reader over fixed buffers.
void put(unsigned char*& p, std::uint64_t v, int n) {
    for (int i = n - 1; i >= 0; --i) {
        *p++ = static_cast<unsigned char>(v >> (8 * i));
    }
}

std::uint64_t get(const unsigned char*& p, int n) {
    std::uint64_t v = 0;
    for (int i = 0; i < n; ++i) {
        v = (v << 8) | *p++;
    }
    return v;
}

bool magic_is(const unsigned char* p, std::string_view magic) {
    return std::memcmp(p, magic.data(), 4) == 0;
}

// The 8-byte messages (Hello, KvAck): magic, version, status, rank.
template <class Status>
std::array<unsigned char, 8> encode_small(std::string_view magic, const RankStatus<Status>& m) {
    std::array<unsigned char, 8> out{};
    std::memcpy(out.data(), magic.data(), 4);
    unsigned char* p = out.data() + 4;
    put(p, kWireVersion, 1);
    put(p, static_cast<std::uint8_t>(m.status), 1);
    put(p, static_cast<std::uint64_t>(m.rank), 2);
    return out;
}

// Nothing when the magic or version is wrong or the status is above `max_status`.
template <class Status>
std::optional<RankStatus<Status>> decode_small(std::span<const unsigned char, 8> in,
                                               std::string_view magic, Status max_status) {
    const unsigned char* p = in.data();
    if (!magic_is(p, magic)) {
        return std::nullopt;
    }
    p += 4;
    if (get(p, 1) != kWireVersion) {
        return std::nullopt;
    }
    const auto status = get(p, 1);
    if (status > static_cast<std::uint8_t>(max_status)) {
        return std::nullopt;
    }
    RankStatus<Status> m;
    m.status = static_cast<Status>(status);
    m.rank = static_cast<int>(get(p, 2));
    return m;
}

}  // namespace

std::string proxy_notif(std::string_view req_id) {
    return msgpack(json{{"type", "ProxyNotif"}, {"req_id", req_id}});
}

std::vector<std::string> garbage_notif(NotifGarbage g) {
    switch (g) {
        case NotifGarbage::NotMsgpack:
            // 0xc1 is the one byte msgpack never uses.
            return {std::string("\xc1\xc1 not msgpack", 14)};
        case NotifGarbage::NonMap:
            return {msgpack(json::array({"ProxyNotif", "garbage-non-map"}))};
        case NotifGarbage::NoReqId:
            return {msgpack(json{{"type", "ProxyNotif"}})};
        case NotifGarbage::ReqIdNotString:
            return {msgpack(json{{"type", "ProxyNotif"}, {"req_id", 12345}})};
        case NotifGarbage::Multipart:
            return {proxy_notif("garbage-multipart"), std::string("second frame")};
        case NotifGarbage::Huge:
            return {msgpack(json{{"type", "ProxyNotif"},
                                 {"req_id", "garbage-huge"},
                                 {"pad", std::string(kHugeNotifBytes, 'x')}})};
    }
    return {};
}

std::array<unsigned char, kHelloSize> encode_hello(const Hello& h) {
    return encode_small("PDKH", h);
}

std::optional<Hello> decode_hello(std::span<const unsigned char, kHelloSize> bytes) {
    return decode_small(bytes, "PDKH", HelloStatus::BadHello);
}

std::string encode_kv_header(const KvHeader& h) {
    std::string out(kKvFixedSize + h.req_id.size(), '\0');
    auto* p = reinterpret_cast<unsigned char*>(out.data());
    std::memcpy(p, "PDKV", 4);
    p += 4;
    put(p, h.pdx ? kWirePdxVersion : kWireVersion, 1);
    put(p, 0, 1);
    put(p, static_cast<std::uint64_t>(h.rank), 2);
    put(p, h.key, 8);
    put(p, h.tokens, 4);
    put(p, h.block_tokens, 4);
    put(p, h.bytes_per_token, 4);
    put(p, h.bytes, 8);
    put(p, h.req_id.size(), 2);
    std::memcpy(p, h.req_id.data(), h.req_id.size());
    return out;
}

std::optional<std::string> decode_kv_fixed(std::span<const unsigned char, kKvFixedSize> bytes,
                                           std::uint32_t max_tokens, KvHeader& out,
                                           std::size_t& id_len) {
    const unsigned char* p = bytes.data();
    if (!magic_is(p, "PDKV")) {
        return "not a KV frame (bad magic)";
    }
    p += 4;
    const auto v = get(p, 1);
    if (v != kWireVersion && v != kWirePdxVersion) {
        return "unsupported KV frame version " + std::to_string(v);
    }
    out.pdx = v == kWirePdxVersion;
    p += 1;
    out.rank = static_cast<int>(get(p, 2));
    out.key = get(p, 8);
    out.tokens = static_cast<std::uint32_t>(get(p, 4));
    out.block_tokens = static_cast<std::uint32_t>(get(p, 4));
    out.bytes_per_token = static_cast<std::uint32_t>(get(p, 4));
    out.bytes = get(p, 8);
    id_len = static_cast<std::size_t>(get(p, 2));
    if (id_len > kMaxReqIdBytes) {
        return "req_id of " + std::to_string(id_len) + " bytes is too long";
    }
    if (out.tokens < 1 || out.tokens > max_tokens) {
        return "token count " + std::to_string(out.tokens) + " is out of range";
    }
    if (out.block_tokens < 1 || out.bytes_per_token < 1) {
        return "block size and bytes per token must be at least 1";
    }
    if (out.bytes != std::uint64_t{out.tokens} * out.bytes_per_token) {
        return "byte count " + std::to_string(out.bytes) + " is not tokens * bytes_per_token";
    }
    return std::nullopt;
}

std::string_view to_string(KvStatus s) noexcept {
    switch (s) {
        case KvStatus::Ok:
            return "ok";
        case KvStatus::BadFrame:
            return "bad frame";
        case KvStatus::WrongRank:
            return "wrong rank";
        case KvStatus::Corrupt:
            return "KV bytes failed verification";
        case KvStatus::TooLarge:
            return "too large";
        case KvStatus::NoBlocks:
            return "no free KV blocks";
        case KvStatus::WriteFailed:
            return "the write through the transfer core failed or its Done did not come";
    }
    return "?";
}

std::array<unsigned char, kAckSize> encode_ack(const KvAck& a) {
    return encode_small("PDKA", a);
}

std::optional<KvAck> decode_ack(std::span<const unsigned char, kAckSize> bytes) {
    return decode_small(bytes, "PDKA", KvStatus::WriteFailed);
}

std::string encode_kv_alloc(const KvAlloc& a) {
    std::string out(
        kAllocFixedSize + 4 * a.blocks.size() + a.transfer_id.size() + a.descriptor.size(), '\0');
    auto* p = reinterpret_cast<unsigned char*>(out.data());
    std::memcpy(p, "PDKB", 4);
    p += 4;
    put(p, kWirePdxVersion, 1);
    put(p, static_cast<std::uint8_t>(a.status), 1);
    put(p, static_cast<std::uint64_t>(a.rank), 2);
    put(p, a.layout, 4);
    put(p, a.block_bytes, 4);
    put(p, a.blocks.size(), 4);
    put(p, a.transfer_id.size(), 2);
    put(p, a.descriptor.size(), 4);
    for (const std::uint32_t b : a.blocks) {
        put(p, b, 4);
    }
    std::memcpy(p, a.transfer_id.data(), a.transfer_id.size());
    p += a.transfer_id.size();
    std::memcpy(p, a.descriptor.data(), a.descriptor.size());
    return out;
}

std::optional<std::string> decode_kv_alloc_fixed(std::span<const unsigned char, kAllocFixedSize> in,
                                                 KvAlloc& out, std::size_t& tail) {
    const unsigned char* p = in.data();
    if (!magic_is(p, "PDKB")) {
        return "not a KV allocation (bad magic)";
    }
    p += 4;
    if (const auto v = get(p, 1); v != kWirePdxVersion) {
        return "unsupported KV allocation version " + std::to_string(v);
    }
    const auto status = get(p, 1);
    if (status > static_cast<std::uint8_t>(KvStatus::WriteFailed)) {
        return "unknown KV allocation status " + std::to_string(status);
    }
    out.status = static_cast<KvStatus>(status);
    out.rank = static_cast<int>(get(p, 2));
    out.layout = static_cast<std::uint32_t>(get(p, 4));
    out.block_bytes = static_cast<std::uint32_t>(get(p, 4));
    const auto blocks = get(p, 4);
    const auto id_len = get(p, 2);
    const auto desc_len = get(p, 4);
    if (blocks > kMaxAllocBlocks || id_len > kMaxTransferIdBytes ||
        desc_len > kMaxDescriptorBytes) {
        return "KV allocation over its bounds (" + std::to_string(blocks) + " blocks, " +
               std::to_string(id_len) + "-byte id, " + std::to_string(desc_len) +
               "-byte descriptor)";
    }
    out.blocks.assign(static_cast<std::size_t>(blocks), 0);
    out.transfer_id.assign(static_cast<std::size_t>(id_len), '\0');
    out.descriptor.assign(static_cast<std::size_t>(desc_len), '\0');
    tail = static_cast<std::size_t>(4 * blocks + id_len + desc_len);
    return std::nullopt;
}

void decode_kv_alloc_tail(std::span<const unsigned char> in, KvAlloc& out) {
    const unsigned char* p = in.data();
    for (auto& b : out.blocks) {
        b = static_cast<std::uint32_t>(get(p, 4));
    }
    std::memcpy(out.transfer_id.data(), p, out.transfer_id.size());
    p += out.transfer_id.size();
    std::memcpy(out.descriptor.data(), p, out.descriptor.size());
}

KvPattern::KvPattern(std::uint64_t key, int rank, std::uint32_t tokens, std::uint32_t block_tokens,
                     std::uint32_t bytes_per_token) noexcept
    : key_(key),
      rank_(rank),
      block_bytes_(std::uint64_t{block_tokens} * bytes_per_token),
      size_(std::uint64_t{tokens} * bytes_per_token) {}

template <class Fn>
void KvPattern::for_each_byte(std::uint64_t offset, std::size_t n, Fn&& fn) const noexcept {
    // One seed per block and one word per 8 bytes, computed as the walk reaches them.
    std::uint64_t block = offset / block_bytes_;
    std::uint64_t in_block = offset % block_bytes_;
    std::uint64_t seed = block_seed(block);
    std::uint64_t word = mix64(seed + in_block / 8);
    for (std::size_t i = 0; i < n; ++i) {
        if (in_block == block_bytes_) {
            ++block;
            in_block = 0;
            seed = block_seed(block);
            word = mix64(seed);
        } else if (in_block % 8 == 0 && i != 0) {
            word = mix64(seed + in_block / 8);
        }
        if (!fn(i, static_cast<unsigned char>(word >> (8 * (in_block % 8))))) {
            return;
        }
        ++in_block;
    }
}

std::uint64_t KvPattern::block_seed(std::uint64_t block) const noexcept {
    return mix64(key_ ^ mix64(static_cast<std::uint64_t>(rank_) + 1) ^ mix64(~block));
}

void KvPattern::fill(std::uint64_t offset, std::span<unsigned char> out) const noexcept {
    for_each_byte(offset, out.size(), [&](std::size_t i, unsigned char b) {
        out[i] = b;
        return true;
    });
}

bool KvPattern::matches(std::uint64_t offset, std::span<const unsigned char> in) const noexcept {
    bool same = true;
    for_each_byte(offset, in.size(), [&](std::size_t i, unsigned char b) {
        same = in[i] == b;
        return same;
    });
    return same;
}

}  // namespace pdr::sim
