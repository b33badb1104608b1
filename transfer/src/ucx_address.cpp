// See ucx_address.hpp.
#include "ucx_address.hpp"

#include <algorithm>
#include <cstdint>
#include <string_view>

namespace pdx::detail {
namespace {

// Transports that carry active messages between processes on any host.
bool is_network_transport(std::string_view t) {
    for (const char* prefix : {"tcp", "rc", "ud", "dc", "ib", "mlx5"}) {
        if (t.substr(0, std::string_view(prefix).size()) == prefix) {
            return true;
        }
    }
    return false;
}

// Calls fn with each entry of a comma-separated list, spaces and tabs around it trimmed.
template <typename Fn>
void for_each_entry(std::string_view list, Fn fn) {
    std::size_t at = 0;
    while (at <= list.size()) {
        const std::size_t comma = std::min(list.find(',', at), list.size());
        std::string_view t = list.substr(at, comma - at);
        while (!t.empty() && (t.front() == ' ' || t.front() == '\t')) {
            t.remove_prefix(1);
        }
        while (!t.empty() && (t.back() == ' ' || t.back() == '\t')) {
            t.remove_suffix(1);
        }
        fn(t);
        at = comma + 1;
    }
}

}  // namespace

bool messages_may_use_shm(const std::string& tls) {
    if (tls.empty() || tls == "all" || tls[0] == '^') {
        return true;
    }
    bool shm = false;
    for_each_entry(tls, [&](std::string_view t) {
        for (const char* s : {"posix", "sysv", "sm", "shm", "mm", "xpmem"}) {
            shm = shm || t == s;
        }
    });
    return shm;
}

std::pair<std::string, std::string> message_transports(const std::string& tls,
                                                       const std::string& net_devices) {
    if (tls.empty() || tls == "all") {
        return {"^sm", net_devices};
    }
    if (tls[0] == '^') {
        return {tls + ",sm", net_devices};
    }
    std::string kept;
    for_each_entry(tls, [&](std::string_view t) {
        if (is_network_transport(t)) {
            kept.append(kept.empty() ? "" : ",").append(t);
        }
    });
    if (kept.empty()) {
        return {"tcp", "lo"};
    }
    return {kept, net_devices};
}

std::vector<std::byte> frame_addresses(const std::vector<std::byte>& data,
                                       const std::vector<std::byte>& messages) {
    std::vector<std::byte> out;
    out.push_back(std::byte(messages.empty() ? 1 : 2));
    for (const auto* a : {&data, &messages}) {
        if (a->empty()) {
            continue;
        }
        for (std::size_t i = 0; i < 4; ++i) {
            out.push_back(std::byte(static_cast<std::uint8_t>(a->size() >> (8 * i))));
        }
        out.insert(out.end(), a->begin(), a->end());
    }
    return out;
}

bool unframe_addresses(std::span<const std::byte> in, std::span<const std::byte>& data,
                       std::span<const std::byte>& messages) {
    if (in.empty()) {
        return false;
    }
    const auto count = std::to_integer<unsigned>(in[0]);
    if (count != 1 && count != 2) {
        return false;
    }
    in = in.subspan(1);
    std::span<const std::byte> parts[2];
    for (unsigned i = 0; i < count; ++i) {
        if (in.size() < 4) {
            return false;
        }
        std::uint64_t len = 0;
        for (std::size_t b = 0; b < 4; ++b) {
            len |= std::uint64_t(std::to_integer<std::uint8_t>(in[b])) << (8 * b);
        }
        if (len == 0 || len > in.size() - 4) {
            return false;
        }
        parts[i] = in.subspan(4, len);
        in = in.subspan(4 + len);
    }
    data = parts[0];
    messages = parts[1];
    return in.empty();
}

}  // namespace pdx::detail
