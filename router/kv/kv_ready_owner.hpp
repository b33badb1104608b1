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

// The req_id to put in a request's disagg_spec: 32 hex digits of the kernel's random bytes
// (getrandom), fresh for each request and never derived from anything a client sent, then
// "@<replica_id>" when there is a replica id. The PULL socket takes a notification for
// whatever id it names: a client that could guess the id (its own X-Request-Id, as it once
// was) could forge "KV ready" and send D off with no KV on it. The client's request id stays
// in the logs and the headers; the log line of a KV-ready failure names both.
inline constexpr std::size_t kKvReqIdRandomChars = 32;
std::string kv_req_id(std::string_view replica_id);

// The replica id in `req_id` (after its last '@'); empty when there is none.
std::string_view owner_of(std::string_view req_id) noexcept;

}  // namespace pdr::kv
