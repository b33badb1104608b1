#pragma once
// LMCache mode on the wire, as pdsim emulates it: the "KV ready" notification a prefill rank
// PUSHes to the router (PROTOCOLS.md §5), and pdsim's own P→D KV transport (LMCache moves KV
// with NIXL; this plain TCP stand-in only has to be checkable). Pure encoders and decoders.
//
// KV transport. Decode TP rank r listens on two ports (its disagg_spec entries):
//   init port   P sends a Hello naming the rank it means; D answers a Hello with its own rank
//               and a status. A P that reached another rank (ports listed out of order) stops.
//   alloc port  P sends frames: a KvHeader, then exactly `bytes` of KV; D answers one KvAck
//               per frame. A connection may carry several frames.
// Integers are big-endian. The KV of (token ids, rank) is KvPattern: block b holds the tokens
// [b * block_tokens, ...) times bytes_per_token bytes, each a function of (hash of the ids,
// rank, b) only, so D checks the bytes as they arrive and never holds them.
#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "sim/faults.hpp"

namespace pdr::sim {

// ---- "KV ready" notification (msgpack) --------------------------------------------------------

// {"type": "ProxyNotif", "req_id": <id>} as msgpack.
std::string proxy_notif(std::string_view req_id);
// The frames of one malformed message of kind `g` (two frames for Multipart, else one).
std::vector<std::string> garbage_notif(NotifGarbage g);
inline constexpr std::size_t kHugeNotifBytes = 8u << 20;

// ---- KV transport ------------------------------------------------------------------------------

inline constexpr std::uint8_t kWireVersion = 1;
// A KV frame of this version carries no payload: the KV goes through the transfer core
// (docs/pdsim.md, "LMCache mode"); D answers a KvAlloc, then, once the bytes are verified, a KvAck.
inline constexpr std::uint8_t kWirePdxVersion = 2;
inline constexpr std::size_t kMaxReqIdBytes = 1024;

// The two 8-byte messages, "PDKH" (hello, both ways) and "PDKA" (ack): magic, version, status,
// rank (2).
template <class Status>
struct RankStatus {
    int rank = 0;
    Status status = Status::Ok;
};
enum class HelloStatus : std::uint8_t { Ok = 0, WrongRank = 1, BadHello = 2 };
using Hello = RankStatus<HelloStatus>;
inline constexpr std::size_t kHelloSize = 8;
std::array<unsigned char, kHelloSize> encode_hello(const Hello& h);
std::optional<Hello> decode_hello(std::span<const unsigned char, kHelloSize> bytes);

struct KvHeader {
    int rank = 0;
    std::uint64_t key = 0;  // hash_ids(token ids the KV covers)
    std::uint32_t tokens = 0;
    std::uint32_t block_tokens = 0;
    std::uint32_t bytes_per_token = 0;
    std::uint64_t bytes = 0;  // payload that follows: tokens * bytes_per_token
    std::string req_id;       // for logs only; KV is keyed by `key`
    bool pdx = false;         // version kWirePdxVersion: no payload follows
};
// "PDKV", version, 0, rank (2), key (8), tokens (4), block_tokens (4), bytes_per_token (4),
// bytes (8), req_id length (2); then the req_id.
inline constexpr std::size_t kKvFixedSize = 38;
std::string encode_kv_header(const KvHeader& h);
// Decodes the fixed part into `out` (all but req_id) and sets `id_len`. Returns an error when
// the magic or version is wrong, the req_id is longer than kMaxReqIdBytes, or the sizes do not
// agree (tokens 1..max_tokens, block_tokens >= 1, bytes == tokens * bytes_per_token).
std::optional<std::string> decode_kv_fixed(std::span<const unsigned char, kKvFixedSize> bytes,
                                           std::uint32_t max_tokens, KvHeader& out,
                                           std::size_t& id_len);

enum class KvStatus : std::uint8_t {
    Ok = 0,
    BadFrame = 1,
    WrongRank = 2,
    Corrupt = 3,
    TooLarge = 4,
    NoBlocks = 5,     // pdx: D's KV pool has too few free blocks
    WriteFailed = 6,  // pdx: P's write failed or its Done did not come in time
};
std::string_view to_string(KvStatus s) noexcept;
using KvAck = RankStatus<KvStatus>;
inline constexpr std::size_t kAckSize = 8;
std::array<unsigned char, kAckSize> encode_ack(const KvAck& a);
std::optional<KvAck> decode_ack(std::span<const unsigned char, kAckSize> bytes);

// pdx: D's answer to a payload-less KV frame, the blocks P writes into through the transfer
// core. "PDKB", version 2, status (1), rank (2), layout (4), block_bytes (4), block count (4),
// transfer_id length (2), descriptor length (4); then the block ids (4 each), the transfer_id and
// D's agent descriptor. A status other than Ok has no blocks, id or descriptor.
struct KvAlloc {
    int rank = 0;
    KvStatus status = KvStatus::Ok;
    std::uint32_t layout = 0;
    std::uint32_t block_bytes = 0;
    std::vector<std::uint32_t> blocks;
    std::string transfer_id;
    std::string descriptor;
};
inline constexpr std::size_t kAllocFixedSize = 26;
inline constexpr std::size_t kMaxAllocBlocks = 1 << 20;
inline constexpr std::size_t kMaxTransferIdBytes = 256;
inline constexpr std::size_t kMaxDescriptorBytes = 1 << 20;
std::string encode_kv_alloc(const KvAlloc& a);
// Decodes the fixed part into `out` and sets `tail` to the bytes that follow; an error when the
// magic, version or status is wrong or a length is over its bound.
std::optional<std::string> decode_kv_alloc_fixed(std::span<const unsigned char, kAllocFixedSize> in,
                                                 KvAlloc& out, std::size_t& tail);
// Fills the block ids, transfer_id and descriptor from the tail (its size as given by `tail`).
void decode_kv_alloc_tail(std::span<const unsigned char> in, KvAlloc& out);

// The deterministic KV bytes of one rank for one id sequence.
class KvPattern {
public:
    KvPattern(std::uint64_t key, int rank, std::uint32_t tokens, std::uint32_t block_tokens,
              std::uint32_t bytes_per_token) noexcept;
    std::uint64_t size() const noexcept { return size_; }
    // Writes bytes [offset, offset + out.size()) (within size()).
    void fill(std::uint64_t offset, std::span<unsigned char> out) const noexcept;
    // True when `in` equals bytes [offset, offset + in.size()).
    bool matches(std::uint64_t offset, std::span<const unsigned char> in) const noexcept;

private:
    std::uint64_t block_seed(std::uint64_t block) const noexcept;
    // Calls fn(i, byte) for bytes [offset, offset + n) until it returns false.
    template <class Fn>
    void for_each_byte(std::uint64_t offset, std::size_t n, Fn&& fn) const noexcept;
    std::uint64_t key_;
    int rank_;
    std::uint64_t block_bytes_;
    std::uint64_t size_;
};

}  // namespace pdr::sim
