#pragma once
// A prefill's side of the LMCache-mode KV transport (sim/lmcache_wire.hpp): moves one D rank's
// KV for one request.
#include "net/common/io.hpp"
#include "sim/lmcache_wire.hpp"

#include <cstdint>
#include <span>
#include <string>

namespace pdr::sim {

struct KvTarget {
    std::string host;
    unsigned short init_port = 0;
    unsigned short alloc_port = 0;
    int rank = 0;
};

struct KvShipment {
    std::uint64_t key = 0;  // hash_ids of the prompt ids
    std::uint32_t tokens = 0;
    std::uint32_t block_tokens = 16;
    std::uint32_t bytes_per_token = 64;
    std::string req_id;
    bool corrupt = false;  // fault: one byte of the payload is wrong
};

// The head of the one KV frame for `kv` to rank `t` (bytes: tokens × bytes_per_token); `pdx`:
// the bytes go through the transfer core, not in the frame.
KvHeader kv_frame_header(const KvTarget& t, const KvShipment& kv, bool pdx);
// "rank 1 (host:port)", for messages.
std::string kv_target_where(const KvTarget& t, unsigned short port);
// The Hello exchange on the target's init port. Returns an error message, empty when D is the
// rank it should be.
awaitable<std::string> kv_handshake(const KvTarget& t, Duration timeout);
// Judges D's ack of one frame (read with `ec`): an error message, empty when acknowledged (or,
// for a copy `corrupt` on purpose, refused as corrupt).
std::string kv_ack_error(const KvTarget& t, const error_code& ec, const std::string& why,
                         std::span<const unsigned char, 8> ack_bytes, bool corrupt);

// Handshake on the init port, then one KV frame on the alloc port and D's ack. Returns an error
// message, empty when D acknowledged the KV. Each network operation is bounded by `timeout`.
awaitable<std::string> send_kv(KvTarget target, KvShipment kv, Duration timeout);

}  // namespace pdr::sim
