#pragma once
// One LMCache "KV ready" message (PROTOCOLS.md §5): a msgpack map with a string `req_id`
// (`{"type": "ProxyNotif", "req_id": "<id>"}`; older LMCache: any map with `req_id`). Other keys
// and `type` are not checked. A message is refused, with the reason it is counted under, when it
// is larger than the frame limit (too_large), is not one msgpack value, or nests deeper than
// kMaxDepth (not_msgpack), is not a map (not_map), has no string `req_id` or an empty one
// (no_req_id), or a `req_id` longer than KvReadyTable::kMaxIdBytes (id_too_long). Multipart
// messages are the socket's to refuse.
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include "router/metrics/router_metrics.hpp"

namespace pdr::kv {

struct KvReadyFrame {
    static constexpr std::size_t kMaxDepth = 32;

    std::string req_id;  // when !malformed
    std::optional<metrics::KvReadyMalformed> malformed;

    bool ok() const noexcept { return !malformed.has_value(); }
};

KvReadyFrame decode_kv_ready(std::string_view bytes, std::size_t max_frame_bytes);

}  // namespace pdr::kv
