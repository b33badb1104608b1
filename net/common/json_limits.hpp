#pragma once
// Guards run before parsing untrusted JSON (client bodies, upstream answers). Documents nested
// deeper than kMaxJsonDepth are rejected up front, so no recursive step (parsing, serializing,
// comparing) can exhaust the stack; objects with more than kMaxJsonObjectMembers members are
// rejected too, because insertion-ordered JSON objects cost O(n²) to build.
#include <nlohmann/json.hpp>

#include <cstddef>
#include <string_view>

namespace pdr {

inline constexpr std::size_t kMaxJsonDepth = 256;
inline constexpr std::size_t kMaxJsonObjectMembers = 1024;

// True when no array/object in `text` nests deeper than `max_depth` and no object has more than
// `max_members` members (strings are skipped; the text need not be valid JSON).
bool json_shape_ok(std::string_view text, std::size_t max_depth = kMaxJsonDepth,
                   std::size_t max_members = kMaxJsonObjectMembers) noexcept;

// Parses untrusted text: a discarded value when it is not JSON or fails json_shape_ok.
nlohmann::json parse_untrusted_json(std::string_view text);

}  // namespace pdr
