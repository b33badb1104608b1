#include "router/kv/kv_ready_owner.hpp"

#include <sys/random.h>

#include <array>
#include <cerrno>
#include <cstddef>
#include <stdexcept>

namespace pdr::kv {

std::string kv_req_id(std::string_view replica_id) {
    std::array<unsigned char, kKvReqIdRandomChars / 2> bytes{};
    std::size_t got = 0;
    while (got < bytes.size()) {  // 16 bytes: one call, unless a signal interrupts it
        const ssize_t n = ::getrandom(bytes.data() + got, bytes.size() - got, 0);
        if (n < 0) {
            if (errno == EINTR) {
                continue;
            }
            throw std::runtime_error("getrandom failed");  // ENOSYS before Linux 3.17 only
        }
        got += static_cast<std::size_t>(n);
    }
    static constexpr char kHex[] = "0123456789abcdef";
    std::string id;
    id.reserve(kKvReqIdRandomChars + (replica_id.empty() ? 0 : 1 + replica_id.size()));
    for (unsigned char b : bytes) {
        id.push_back(kHex[b >> 4]);
        id.push_back(kHex[b & 15]);
    }
    if (!replica_id.empty()) {
        id.append("@").append(replica_id);
    }
    return id;
}

std::string_view owner_of(std::string_view req_id) noexcept {
    const std::size_t at = req_id.rfind('@');
    return at == std::string_view::npos ? std::string_view{} : req_id.substr(at + 1);
}

}  // namespace pdr::kv
