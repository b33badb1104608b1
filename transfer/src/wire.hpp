#pragma once
// Little-endian wire formats: the agent descriptor blob and the notification header.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "pdx/types.hpp"

namespace pdx::detail {

inline constexpr std::uint32_t kDescriptorMagic = 0x44584450;  // "PDXD"
inline constexpr std::uint16_t kDescriptorVersion = 2;
// magic, version, reserved, total length, CRC32C: checked before anything else is read
inline constexpr std::size_t kDescriptorHeaderBytes = 16;
inline constexpr std::uint32_t kNotifyMagic = 0x4e584450;  // "PDXN"
inline constexpr std::uint16_t kNotifyVersion = 1;
inline constexpr std::size_t kNotifyHeaderBytes = 40;
inline constexpr std::uint8_t kNotifyFlagInternal = 0x1;  // core heartbeat, not delivered
// On the first heartbeat of an add_peer that connects again to an instance this agent had
// declared gone (and whose connection it closed), with transfer_id = milliseconds since that
// close and sequence = the sender's peer_timeout in ms: a receiver whose own connection to the
// sender was made before that close is left with a stale one (over tcp what it sends there no
// longer arrives), so it connects again.
inline constexpr std::uint8_t kNotifyFlagReconnect = 0x2;
inline constexpr std::size_t kMaxDescriptorBytes = 16u << 20;
// Upper bounds of the descriptor's variable-length fields (a blob past them is refused).
inline constexpr std::size_t kMaxNameBytes = 256;
inline constexpr std::size_t kMaxHostIdBytes = 1024;
inline constexpr std::size_t kMaxAddressBytes = 64u << 10;
inline constexpr std::size_t kMaxRkeyBytes = 64u << 10;

// CRC32C (Castagnoli, reflected polynomial 0x82f63b78, initial and final xor 0xffffffff);
// crc32c("123456789") = 0xe3069283. `crc` continues an earlier call's result.
std::uint32_t crc32c(std::span<const std::byte> data, std::uint32_t crc = 0);

// Hash of everything both sides must agree on (format, layout ABI).
std::uint64_t compat_hash();
std::uint64_t fnv1a(std::span<const std::byte> data, std::uint64_t seed = 0xcbf29ce484222325ull);

struct RemoteRegion {
    std::uint64_t base = 0;
    std::uint64_t size = 0;
    std::vector<std::byte> rkey;
};

// The process an agent runs in, for same-host liveness checks: its pid, its start time
// (/proc/<pid>/stat field 22, clock ticks since boot: a reused pid has another) and the inode
// of its pid namespace (a pid means the same process only within one namespace).
struct ProcessId {
    std::uint32_t pid = 0;  // 0: unknown
    std::uint64_t start_time = 0;
    std::uint64_t pid_ns = 0;
};

struct Descriptor {
    // first: what every post reads (Agent::Impl::Peer keeps them in its first cache line)
    std::vector<RemoteRegion> regions;  // index = RegionId (released ones have size 0)
    std::vector<Layout> layouts;        // index = LayoutId
    std::uint64_t compat = 0;
    std::uint64_t instance = 0;
    BackendKind backend = BackendKind::Ucx;
    std::string name;
    std::string host_id;
    ProcessId process;
    std::vector<std::byte> address;
};

std::vector<std::byte> encode_descriptor(const Descriptor& d);
// Checks the header (magic, version, total length) and the CRC32C over the whole blob before
// anything else is read, then the compat hash, every length against its bound and what is
// left, each region (base + size must not wrap) and that every layout fits its region.
Result<Descriptor> decode_descriptor(std::span<const std::byte> blob);
// Rewrites the length and CRC32C fields of a blob that has at least a header (tests, fuzzing).
void reseal_descriptor(std::span<std::byte> blob);

struct NotifyHeader {
    std::uint8_t kind = 0;
    std::uint8_t flags = 0;
    std::uint64_t transfer_id = 0;
    std::uint32_t sequence = 0;
    std::uint32_t expected = 0;
    std::int32_t status = 0;
    std::uint32_t payload_bytes = 0;
    std::uint64_t sender = 0;
};

std::vector<std::byte> encode_notification(const Notification& n, std::uint8_t flags,
                                           std::uint64_t sender);
struct DecodedNotification {
    NotifyHeader header;
    Notification notification;
};
Result<DecodedNotification> decode_notification(std::span<const std::byte> msg);

// Checked arithmetic for layouts: false on overflow or if the layout leaves the region.
bool layout_fits(const Layout& l, std::uint64_t region_bytes);

}  // namespace pdx::detail
