#include "net/common/json_limits.hpp"

#include <array>

namespace pdr {

bool json_shape_ok(std::string_view text, std::size_t max_depth, std::size_t max_members) noexcept {
    // Per open container: whether it is an object, and its member count so far (commas + 1).
    struct Level {
        bool object = false;
        std::size_t members = 0;
    };
    std::array<Level, kMaxJsonDepth + 1> stack{};
    const std::size_t depth_limit = max_depth < kMaxJsonDepth ? max_depth : kMaxJsonDepth;
    std::size_t depth = 0;
    const std::size_t n = text.size();
    for (std::size_t i = 0; i < n; ++i) {
        switch (text[i]) {
            case '[':
            case '{':
                if (++depth > depth_limit) {
                    return false;
                }
                stack[depth] = Level{text[i] == '{', 0};
                break;
            case ']':
            case '}':
                if (depth > 0) {
                    --depth;
                }
                break;
            case ':':
                // One colon per member: count members where they are introduced.
                if (depth > 0 && stack[depth].object && ++stack[depth].members > max_members) {
                    return false;
                }
                break;
            case '"':
                // Skip the string: up to the next unescaped quote.
                for (++i; i < n; ++i) {
                    const std::size_t q = text.find_first_of("\\\"", i);
                    if (q == std::string_view::npos) {
                        return true;
                    }
                    if (text[q] == '"') {
                        i = q;
                        break;
                    }
                    i = q + 1;  // skip the escaped character
                }
                break;
            default:
                break;
        }
    }
    return true;
}

nlohmann::json parse_untrusted_json(std::string_view text) {
    if (!json_shape_ok(text)) {
        return nlohmann::json(nlohmann::json::value_t::discarded);
    }
    return nlohmann::json::parse(text, nullptr, false);
}

}  // namespace pdr
