// InstanceAddress parsing and printing.
#include <arpa/inet.h>

#include <cctype>
#include <charconv>
#include <utility>

#include "config/ascii.hpp"
#include "config/config.hpp"

namespace pdr::config {

namespace {

// Host name syntax (RFC 1123 2.1, with '_' allowed for internal names): at most 253 characters
// (one trailing dot allowed), dot-separated labels of 1 to 63 letters, digits, '-' or '_', none
// starting or ending with '-'. Numeric IPv4 spellings pass too; see numeric_last_label.
bool valid_host_syntax(std::string_view h) {
    if (!h.empty() && h.back() == '.') {
        h.remove_suffix(1);
    }
    if (h.empty() || h.size() > 253) {
        return false;
    }
    std::size_t label = 0;
    for (std::size_t i = 0; i <= h.size(); ++i) {
        if (i == h.size() || h[i] == '.') {
            if (label == 0 || label > 63 || h[i - 1] == '-') {
                return false;
            }
            label = 0;
            continue;
        }
        const char c = h[i];
        if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_')) {
            return false;
        }
        if (label == 0 && c == '-') {
            return false;
        }
        ++label;
    }
    return true;
}

// A DNS name's last label is never all digits (RFC 1123 2.1): such a host can only be meant as
// a numeric IPv4 address ("256.1.1.1", "1.2.3.4.5" are typos, not names to look up).
bool numeric_last_label(std::string_view h) {
    if (!h.empty() && h.back() == '.') {
        h.remove_suffix(1);
    }
    const auto dot = h.rfind('.');
    const std::string_view last = dot == std::string_view::npos ? h : h.substr(dot + 1);
    for (char c : last) {
        if (!std::isdigit(static_cast<unsigned char>(c))) {
            return false;
        }
    }
    return !last.empty();
}

// The one text form of an IPv6 address (RFC 5952, as inet_ntop writes it: "::1" for
// "0:0:0:0:0:0:0:1"), its zone id (after '%', not empty) kept; false if it is not one.
bool canonical_v6(std::string_view h, std::string& out) {
    const auto pct = h.find('%');
    if (pct != std::string_view::npos && pct + 1 >= h.size()) {
        return false;
    }
    if (pct != std::string_view::npos) {
        // A zone is an interface name or index: letters, digits, '.', '-', '_' (IFNAMSIZ).
        const std::string_view zone = h.substr(pct + 1);
        if (zone.size() > 15) {
            return false;
        }
        for (char c : zone) {
            if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' ||
                  c == '_')) {
                return false;
            }
        }
    }
    const std::string addr(h.substr(0, pct));
    in6_addr a{};
    char text[INET6_ADDRSTRLEN];
    if (::inet_pton(AF_INET6, addr.c_str(), &a) != 1 ||
        ::inet_ntop(AF_INET6, &a, text, sizeof text) == nullptr) {
        return false;
    }
    out = text;
    if (pct != std::string_view::npos) {
        out += h.substr(pct);
    }
    return true;
}

// The dotted-quad form of a numeric IPv4 host in any spelling the resolver accepts ("127.1",
// "0x7f000001", "2130706433", "0177.0.0.1"), so that one engine is one instance whatever the
// spelling; false for a DNS name. Only hosts that start with a digit are tried: a DNS label never
// reads as a number to getaddrinfo unless inet_aton takes it, which is what is checked here.
bool canonical_v4(std::string_view h, std::string& out) {
    if (h.empty() || !std::isdigit(static_cast<unsigned char>(h.front()))) {
        return false;
    }
    const std::string addr(h);
    in_addr a{};
    char text[INET_ADDRSTRLEN];
    if (::inet_aton(addr.c_str(), &a) == 0 ||
        ::inet_ntop(AF_INET, &a, text, sizeof text) == nullptr) {
        return false;
    }
    out = text;
    return true;
}

}  // namespace

std::string InstanceAddress::text() const {
    std::string out;
    if (host.find(':') != std::string::npos) {
        out = "[" + host + "]";
    } else {
        out = host;
    }
    out += ':';
    out += std::to_string(port);
    return out;
}

bool parse_instance_address(std::string_view s, InstanceAddress& out, std::string& error) {
    constexpr std::string_view kExpect = " (expected HOST:PORT, http://HOST:PORT or [IPv6]:PORT)";
    std::string_view rest = s;
    if (rest.empty()) {
        error = std::string("empty address") + std::string(kExpect);
        return false;
    }
    if (ascii::istarts_with(rest, "https://")) {
        error = "https:// is not supported (upstreams are plain HTTP)";
        return false;
    }
    if (ascii::istarts_with(rest, "http://")) {
        rest.remove_prefix(7);
    }
    if (!rest.empty() && rest.back() == '/') {
        rest.remove_suffix(1);
    }
    if (rest.find('/') != std::string_view::npos) {
        error = "a path is not allowed" + std::string(kExpect);
        return false;
    }
    std::string_view host, port;
    std::string v6;
    if (!rest.empty() && rest.front() == '[') {
        auto close = rest.find(']');
        if (close == std::string_view::npos) {
            error = "missing ']' after IPv6 address" + std::string(kExpect);
            return false;
        }
        host = rest.substr(1, close - 1);
        std::string_view tail = rest.substr(close + 1);
        if (tail.size() < 2 || tail.front() != ':') {
            error = "missing port" + std::string(kExpect);
            return false;
        }
        port = tail.substr(1);
        if (host.empty() || !canonical_v6(host, v6)) {
            error = "invalid IPv6 address";
            return false;
        }
        host = v6;  // one name per address: [0::1] and [::1] are the same instance
    } else {
        auto colon = rest.rfind(':');
        if (colon == std::string_view::npos) {
            error = "missing port" + std::string(kExpect);
            return false;
        }
        host = rest.substr(0, colon);
        port = rest.substr(colon + 1);
        if (host.find(':') != std::string_view::npos) {
            error = "an IPv6 address needs brackets, e.g. [::1]:8100";
            return false;
        }
        if (host.empty()) {
            error = "missing host" + std::string(kExpect);
            return false;
        }
        if (!valid_host_syntax(host)) {
            error = "invalid host name";
            return false;
        }
        if (host.back() == '.') {
            host.remove_suffix(1);  // "engine.example." is "engine.example"
        }
        if (canonical_v4(host, v6)) {
            host = v6;  // one name per address: 127.1 and 127.0.0.1 are the same instance
        } else if (numeric_last_label(host)) {
            error = "invalid IPv4 address";
            return false;
        }
    }
    unsigned value = 0;
    auto [ptr, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
    if (port.empty() || ec != std::errc() || ptr != port.data() + port.size() || value == 0 ||
        value > 65535) {
        error = "invalid port (expected 1..65535)";
        return false;
    }
    out.host.clear();
    const auto zone = host.find('%');  // an interface name keeps its case
    for (std::size_t i = 0; i < host.size(); ++i) {
        out.host += i < zone ? ascii::lower(host[i]) : host[i];  // names and IPv6 hex: any case
    }
    out.port = static_cast<unsigned short>(value);
    return true;
}

std::string_view to_string(OnMissingKvParams v) noexcept {
    return v == OnMissingKvParams::Error ? "error" : "recompute";
}

std::string_view to_string(RewriteKvHost v) noexcept {
    switch (v) {
        case RewriteKvHost::Never:
            return "never";
        case RewriteKvHost::Always:
            return "always";
        case RewriteKvHost::Auto:
            break;
    }
    return "auto";
}

std::string_view to_string(KvMode v) noexcept {
    switch (v) {
        case KvMode::Pull:
            return "pull";
        case KvMode::Push:
            return "push";
        case KvMode::Lmcache:
            return "lmcache";
    }
    return "pull";
}

std::string_view to_string(OnKvReadyTimeout v) noexcept {
    return v == OnKvReadyTimeout::Proceed ? "proceed" : "error";
}

namespace {
constexpr std::pair<Policy, std::string_view> kPolicyNames[] = {
    {Policy::RoundRobin, "round_robin"},
    {Policy::LeastOutstanding, "least_outstanding"},
    {Policy::PowerOfTwo, "power_of_two"},
    {Policy::PrefixAffinity, "prefix_affinity"},
};
}  // namespace

std::string_view to_string(Policy v) noexcept {
    for (const auto& [p, name] : kPolicyNames) {
        if (p == v) {
            return name;
        }
    }
    return "round_robin";
}

bool parse_policy(std::string_view s, Policy& out) noexcept {
    for (const auto& [p, name] : kPolicyNames) {
        if (name == s) {
            out = p;
            return true;
        }
    }
    return false;
}

bool parse_port_list(std::string_view s, std::vector<unsigned short>& out, std::string& error) {
    out.clear();
    while (true) {
        const auto comma = s.find(',');
        const std::string_view item = s.substr(0, comma);
        unsigned long port = 0;
        auto [ptr, ec] = std::from_chars(item.data(), item.data() + item.size(), port);
        if (item.empty() || ec != std::errc() || ptr != item.data() + item.size() || port == 0 ||
            port > 65535) {
            error = "item " + std::to_string(out.size() + 1) + " is not a port 1..65535";
            return false;
        }
        out.push_back(static_cast<unsigned short>(port));
        if (out.size() > kMaxTpRanks) {
            error = "more than " + std::to_string(kMaxTpRanks) + " ranks";
            return false;
        }
        if (comma == std::string_view::npos) {
            return true;
        }
        s.remove_prefix(comma + 1);
    }
}

std::string check_engine_id(std::string_view id) {
    if (id.empty()) {
        return "an engine id must not be empty";
    }
    if (id.size() > 256) {
        return "an engine id is at most 256 characters";
    }
    for (const char c : id) {
        if (c <= ' ' || c > '~') {
            return "an engine id holds printable ASCII characters only, no spaces";
        }
    }
    return {};
}

}  // namespace pdr::config
