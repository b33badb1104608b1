#pragma once
// Which router replica owns a KV-ready req_id (several replicas in lmcache mode, issue 18). A
// replica with an id issues req_ids "<request id>@<replica id>", so the owner is decided from
// the id alone: the text after the last '@'. Replica ids hold no '@' (config checks them).
#include <string>
#include <string_view>

namespace pdr::kv {

// The first part of a message one replica forwards to another: [kForwardedMark, the frame as it
// came]. A replica never forwards such a message again.
inline constexpr std::string_view kForwardedMark = "pdrouter-kv-ready-forwarded/1";

// The req_id to put in a request's disagg_spec: `request_id` unchanged without a replica id,
// else "<request_id>@<replica_id>"; when that would be longer than `max_bytes`, a fresh UUIDv4
// takes the request id's place.
std::string kv_req_id(std::string_view request_id, std::string_view replica_id,
                      std::size_t max_bytes);

// The replica id in `req_id` (after its last '@'); empty when there is none.
std::string_view owner_of(std::string_view req_id) noexcept;

}  // namespace pdr::kv
