// libFuzzer target for the LMCache "KV ready" notification decoder (router/kv/kv_ready_frame):
// one ZMQ message from an engine, a msgpack map with a string req_id. A message it takes has a
// non-empty req_id within the table's id limit; a message over the frame limit is refused.
// Build and run: scripts/fuzz kv_ready SECONDS. Seeds: corpus/kv_ready/.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "router/kv/kv_ready_frame.hpp"
#include "router/kv/kv_ready_table.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    using namespace pdr::kv;
    const std::string_view in(reinterpret_cast<const char*>(data), size);
    constexpr std::size_t kFrameLimit = 4096;  // KvReadyListener's default max_frame_bytes
    const KvReadyFrame f = decode_kv_ready(in, kFrameLimit);
    if (f.ok() &&
        (f.req_id.empty() || f.req_id.size() > KvReadyTable::kMaxIdBytes || size > kFrameLimit)) {
        std::abort();
    }
    return 0;
}
