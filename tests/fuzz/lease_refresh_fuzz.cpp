// libFuzzer target for the body of POST /internal/nixl/lease_refresh ({"request_ids": [...]}),
// as the router's handler reads it (api::parse_lease_refresh). Ids taken are at most the cap,
// and a refused body says why. Build and run: scripts/fuzz lease_refresh SECONDS. Seeds:
// corpus/lease_refresh/.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "router/api/validate.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string_view in(reinterpret_cast<const char*>(data), size);
    std::vector<std::string> ids;
    const pdr::api::ValidationError err = pdr::api::parse_lease_refresh(in, ids);
    if (err.ok() ? ids.size() > pdr::api::kMaxLeaseRefreshIds : err.message.empty()) {
        std::abort();
    }
    return 0;
}
