#pragma once
// A guard run before parsing untrusted JSON (client bodies, upstream answers): documents nested
// deeper than the limit are rejected up front, so no recursive step (parsing, serializing,
// comparing) can exhaust the stack.
#include <nlohmann/json.hpp>

#include <cstddef>
#include <string_view>

namespace pdr {

inline constexpr std::size_t kMaxJsonDepth = 256;

// True when no array/object in `text` nests deeper than `max_depth` (strings are skipped; the
// text need not be valid JSON).
bool json_depth_ok(std::string_view text, std::size_t max_depth = kMaxJsonDepth) noexcept;

// Parses untrusted text: a discarded value when it is not JSON or nests deeper than kMaxJsonDepth.
nlohmann::json parse_untrusted_json(std::string_view text);

}  // namespace pdr
