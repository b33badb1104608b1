#pragma once
// The X-Request-Id rules shared by the flows (both legs and the answer carry one id) and by the
// HTTP server (answers it makes itself, such as 413, carry the client's id too).
#include <algorithm>
#include <string>
#include <string_view>

#include "net/common/fields.hpp"
#include "net/common/uuid.hpp"

namespace pdr {

inline constexpr std::string_view kRequestIdHeader = "X-Request-Id";
inline constexpr std::size_t kMaxRequestIdLength = 256;

// The X-Request-Id of `fields` when present and sane (1..256 visible ASCII characters), else a
// fresh UUIDv4.
template <class Fields>
std::string request_id_of(const Fields& fields) {
    if (const auto* f = wire::find_field(fields, kRequestIdHeader)) {
        const std::string_view v = f->value();
        const bool sane =
            !v.empty() && v.size() <= kMaxRequestIdLength &&
            std::all_of(v.begin(), v.end(), [](char c) { return c > 0x20 && c < 0x7f; });
        if (sane) {
            return std::string(v);
        }
    }
    return make_uuid_v4();
}

}  // namespace pdr
