// Reading scalar values out of scanned JSON text: integers and strings.
#include "net/common/json_scan.hpp"

#include <algorithm>
#include <charconv>

namespace pdr {

namespace detail {

int json_hex_digit(char c) noexcept {
    if (c >= '0' && c <= '9') {
        return c - '0';
    }
    if (c >= 'a' && c <= 'f') {
        return c - 'a' + 10;
    }
    if (c >= 'A' && c <= 'F') {
        return c - 'A' + 10;
    }
    return -1;
}

}  // namespace detail

namespace {

void append_utf8(std::string& out, std::uint32_t cp) {
    if (cp < 0x80) {
        out.push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
        out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
        out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else {
        out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
}

std::uint32_t read_hex4(std::string_view s, std::size_t at) {
    std::uint32_t v = 0;
    for (std::size_t i = 0; i < 4 && at + i < s.size(); ++i) {
        v = v * 16 + static_cast<std::uint32_t>(std::max(0, detail::json_hex_digit(s[at + i])));
    }
    return v;
}

}  // namespace

bool json_integer(std::string_view text, std::int64_t& out) noexcept {
    if (text.empty() || text.find_first_of(".eE") != std::string_view::npos) {
        return false;
    }
    if (text.front() == '-') {
        std::int64_t v = 0;
        auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
        if (ec != std::errc{} || ptr != text.data() + text.size()) {
            return false;
        }
        out = v;
        return true;
    }
    std::uint64_t v = 0;
    auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    if (ec != std::errc{} || ptr != text.data() + text.size()) {
        return false;
    }
    if (v > static_cast<std::uint64_t>(INT64_MAX)) {
        return false;  // no engine takes a count this large: refused, not clamped
    }
    out = static_cast<std::int64_t>(v);
    return true;
}

std::string json_string(std::string_view value_text) {
    std::string out;
    if (value_text.size() < 2) {
        return out;
    }
    std::string_view s = value_text.substr(1, value_text.size() - 2);
    out.reserve(s.size());
    for (std::size_t i = 0; i < s.size(); ++i) {
        // Copy the run up to the next backslash at once (most strings have none).
        const std::size_t escape = s.find('\\', i);
        if (escape == std::string_view::npos || escape + 1 >= s.size()) {
            out.append(s.substr(i));
            break;
        }
        out.append(s.substr(i, escape - i));
        i = escape;
        const char e = s[++i];
        if (e != 'u') {
            // \b \f \n \r \t stand for control characters; \" \\ \/ for themselves.
            constexpr std::string_view kEscaped = "bfnrt";
            constexpr std::string_view kMeaning = "\b\f\n\r\t";
            const std::size_t k = kEscaped.find(e);
            out.push_back(k == std::string_view::npos ? e : kMeaning[k]);
            continue;
        }
        std::uint32_t cp = read_hex4(s, i + 1);
        i += 4;
        if (cp >= 0xD800 && cp <= 0xDBFF && i + 6 < s.size() && s[i + 1] == '\\' &&
            s[i + 2] == 'u') {
            const std::uint32_t low = read_hex4(s, i + 3);
            cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
            i += 6;
        }
        append_utf8(out, cp);
    }
    return out;
}

}  // namespace pdr
