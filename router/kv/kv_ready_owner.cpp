#include "router/kv/kv_ready_owner.hpp"

#include "net/common/uuid.hpp"

namespace pdr::kv {

std::string kv_req_id(std::string_view request_id, std::string_view replica_id,
                      std::size_t max_bytes) {
    if (replica_id.empty()) {
        return std::string(request_id);
    }
    std::string id;
    if (request_id.size() + 1 + replica_id.size() <= max_bytes) {
        id = request_id;
    } else {
        id = make_uuid_v4();
    }
    id.append("@").append(replica_id);
    return id;
}

std::string_view owner_of(std::string_view req_id) noexcept {
    const std::size_t at = req_id.rfind('@');
    return at == std::string_view::npos ? std::string_view{} : req_id.substr(at + 1);
}

}  // namespace pdr::kv
