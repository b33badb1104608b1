#include "router/common/json_depth.hpp"

namespace pdr {

bool json_depth_ok(std::string_view text, std::size_t max_depth) noexcept {
    std::size_t depth = 0;
    const std::size_t n = text.size();
    for (std::size_t i = 0; i < n; ++i) {
        switch (text[i]) {
            case '[':
            case '{':
                if (++depth > max_depth) {
                    return false;
                }
                break;
            case ']':
            case '}':
                if (depth > 0) {
                    --depth;
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
    if (!json_depth_ok(text)) {
        return nlohmann::json(nlohmann::json::value_t::discarded);
    }
    return nlohmann::json::parse(text, nullptr, false);
}

}  // namespace pdr
