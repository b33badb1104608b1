#pragma once
// ASCII text rules for protocol tokens and configuration words (HTTP field values, URL schemes,
// option values), defined once for every layer: config/ is a leaf, so net/, router/ and sim/
// use these too. Only A-Z fold to a-z; other bytes (UTF-8 included) compare as they are.
#include <cstddef>
#include <string>
#include <string_view>

namespace pdr::ascii {

constexpr char lower(char c) noexcept {
    return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c;
}

inline std::string lower(std::string_view s) {
    std::string out(s);
    for (char& c : out) {
        c = lower(c);
    }
    return out;
}

// Equal but for the case of ASCII letters.
constexpr bool iequals(std::string_view a, std::string_view b) noexcept {
    if (a.size() != b.size()) {
        return false;
    }
    for (std::size_t i = 0; i < a.size(); ++i) {
        if (lower(a[i]) != lower(b[i])) {
            return false;
        }
    }
    return true;
}

// `s` starts with `prefix`, but for the case of ASCII letters ("HTTP://h" and "http://").
constexpr bool istarts_with(std::string_view s, std::string_view prefix) noexcept {
    return s.size() >= prefix.size() && iequals(s.substr(0, prefix.size()), prefix);
}

// `s` without the spaces and tabs at either end: HTTP's optional whitespace (RFC 9110 5.6.3)
// around a field value or list item, and the padding around a config list item.
constexpr std::string_view trim(std::string_view s) noexcept {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) {
        s.remove_prefix(1);
    }
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) {
        s.remove_suffix(1);
    }
    return s;
}

}  // namespace pdr::ascii
