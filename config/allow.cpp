// --instance-allow: which admin-added instances may see the upstream API key.
#include <arpa/inet.h>

#include <array>
#include <charconv>
#include <cstdint>
#include <string>

#include "config/ascii.hpp"
#include "config/config.hpp"

namespace pdr::config {

namespace {

// A numeric address as 16 bytes (v4 in the first 4) and its family; false when not numeric.
struct Numeric {
    int family = 0;
    std::array<unsigned char, 16> bytes{};
};

bool parse_numeric(std::string_view text, Numeric& out) {
    const std::string s(text);
    if (inet_pton(AF_INET, s.c_str(), out.bytes.data()) == 1) {
        out.family = AF_INET;
        return true;
    }
    if (inet_pton(AF_INET6, s.c_str(), out.bytes.data()) == 1) {
        out.family = AF_INET6;
        return true;
    }
    return false;
}

int max_prefix(int family) {
    return family == AF_INET ? 32 : 128;
}

// "ADDR/BITS": false when not of that shape or out of range.
bool parse_cidr(std::string_view entry, Numeric& net, int& bits) {
    const auto slash = entry.find('/');
    if (slash == std::string_view::npos || !parse_numeric(entry.substr(0, slash), net)) {
        return false;
    }
    const std::string_view b = entry.substr(slash + 1);
    const auto [ptr, ec] = std::from_chars(b.data(), b.data() + b.size(), bits);
    return ec == std::errc{} && ptr == b.data() + b.size() && bits >= 0 &&
           bits <= max_prefix(net.family);
}

bool same_prefix(const Numeric& a, const Numeric& b, int bits) {
    if (a.family != b.family) {
        return false;
    }
    for (int i = 0; i < bits / 8; ++i) {
        if (a.bytes[i] != b.bytes[i]) {
            return false;
        }
    }
    if (bits % 8 == 0) {
        return true;
    }
    const auto mask = static_cast<unsigned char>(0xff << (8 - bits % 8));
    return (a.bytes[bits / 8] & mask) == (b.bytes[bits / 8] & mask);
}

}  // namespace

std::string check_allow_entry(std::string_view entry) {
    if (entry.find('/') != std::string_view::npos) {
        Numeric net;
        int bits = 0;
        return parse_cidr(entry, net, bits) ? std::string{}
                                            : "expected a CIDR such as 10.0.0.0/8 or fd00::/8";
    }
    InstanceAddress a;
    std::string error;
    Numeric n;
    if (parse_numeric(entry, n) || (entry.find_first_of("[]:") == std::string_view::npos &&
                                    parse_instance_address(std::string(entry) + ":1", a, error))) {
        return {};
    }
    return "expected a CIDR, an IP address or a host name";
}

bool allow_entry_is_numeric(std::string_view entry) {
    Numeric n;
    int bits = 0;
    return entry.find('/') != std::string_view::npos ? parse_cidr(entry, n, bits)
                                                     : parse_numeric(entry, n);
}

bool allow_matches(const std::vector<std::string>& allow, std::string_view host) {
    Numeric h;
    const bool numeric = parse_numeric(host, h);
    for (const std::string& entry : allow) {
        Numeric net;
        int bits = 0;
        if (parse_cidr(entry, net, bits)) {
            if (numeric && same_prefix(h, net, bits)) {
                return true;
            }
        } else if (parse_numeric(entry, net)) {
            if (numeric && same_prefix(h, net, max_prefix(net.family))) {
                return true;
            }
        } else if (ascii::iequals(entry, host)) {
            return true;
        }
    }
    return false;
}

}  // namespace pdr::config
