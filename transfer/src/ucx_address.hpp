#pragma once
// The UCX backend's choice of transports for its message worker, and the framing of its two
// worker addresses in a descriptor (docs/transfer.md, "Messages never use shared memory").
// Plain functions of strings and bytes, without UCX, so that tests can reach them.
#include <cstddef>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace pdx::detail {

// True when a UCX_TLS list may put active messages into a shared-memory receive FIFO (posix,
// sysv, sm, shm, mm, xpmem; or UCX's own choice: an empty list, "all", a deny list).
bool messages_may_use_shm(const std::string& tls);

// UCX_TLS and UCX_NET_DEVICES of the message worker: the list's network transports (entries
// trimmed), "^sm" added to a deny list or standing for an empty one, or "tcp" over "lo" when
// the list has no network transport (its peers are on this host).
std::pair<std::string, std::string> message_transports(const std::string& tls,
                                                       const std::string& net_devices);

// u8 count (1, or 2 when `messages` is not empty), then per address a u32 little-endian length
// and the bytes: the data worker's address first.
std::vector<std::byte> frame_addresses(const std::vector<std::byte>& data,
                                       const std::vector<std::byte>& messages);
// The addresses of a framed blob (`messages` empty when it holds one); false when the framing
// is broken (a count other than 1 or 2, an empty or overlong address, trailing bytes).
bool unframe_addresses(std::span<const std::byte> in, std::span<const std::byte>& data,
                       std::span<const std::byte>& messages);

}  // namespace pdx::detail
