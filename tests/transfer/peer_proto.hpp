#pragma once
// Shared by the multi-process test and its helper process (pdx_test_peer): the byte pattern
// blocks are filled with, hex helpers and a line channel over a socket.
#include <poll.h>
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace pdx::test {

inline std::byte pattern_byte(std::uint32_t seed, std::uint32_t block, std::size_t i) {
    std::uint32_t x = seed * 2654435761u ^ block * 40503u ^ static_cast<std::uint32_t>(i >> 6);
    return std::byte(static_cast<std::uint8_t>(x ^ (i * 13u) ^ (x >> 11)));
}

inline void fill_block(std::span<std::byte> b, std::uint32_t seed, std::uint32_t block) {
    for (std::size_t i = 0; i < b.size(); ++i) {
        b[i] = pattern_byte(seed, block, i);
    }
}

// Returns the first mismatching offset, or -1.
inline long long check_block(std::span<const std::byte> b, std::uint32_t seed,
                             std::uint32_t block) {
    for (std::size_t i = 0; i < b.size(); ++i) {
        if (b[i] != pattern_byte(seed, block, i)) {
            return static_cast<long long>(i);
        }
    }
    return -1;
}

inline std::string to_hex(std::span<const std::byte> b) {
    static const char* d = "0123456789abcdef";
    std::string s;
    s.reserve(b.size() * 2);
    for (auto x : b) {
        auto v = std::to_integer<unsigned>(x);
        s.push_back(d[v >> 4]);
        s.push_back(d[v & 15]);
    }
    return s;
}

inline std::vector<std::byte> from_hex(const std::string& s) {
    auto nib = [](char c) { return c <= '9' ? c - '0' : c - 'a' + 10; };
    std::vector<std::byte> out(s.size() / 2);
    for (std::size_t i = 0; i < out.size(); ++i) {
        out[i] = std::byte(static_cast<std::uint8_t>(nib(s[2 * i]) << 4 | nib(s[2 * i + 1])));
    }
    return out;
}

// Newline-delimited messages over a stream socket.
class LineChannel {
public:
    explicit LineChannel(int fd) : fd_(fd) {}
    int fd() const { return fd_; }
    bool send(const std::string& line) {
        std::string m = line + "\n";
        std::size_t off = 0;
        while (off < m.size()) {
            ssize_t n = ::write(fd_, m.data() + off, m.size() - off);
            if (n <= 0) {
                return false;
            }
            off += static_cast<std::size_t>(n);
        }
        return true;
    }
    // A complete line if one is buffered or arrives within `timeout`; nullopt on timeout/EOF.
    std::optional<std::string> recv(std::chrono::milliseconds timeout) {
        auto until = std::chrono::steady_clock::now() + timeout;
        for (;;) {
            auto nl = buf_.find('\n');
            if (nl != std::string::npos) {
                std::string line = buf_.substr(0, nl);
                buf_.erase(0, nl + 1);
                return line;
            }
            auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                until - std::chrono::steady_clock::now());
            if (left.count() < 0) {
                return std::nullopt;
            }
            pollfd p{fd_, POLLIN, 0};
            if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) {
                if (std::chrono::steady_clock::now() >= until) {
                    return std::nullopt;
                }
                continue;
            }
            char tmp[65536];
            ssize_t n = ::read(fd_, tmp, sizeof tmp);
            if (n <= 0) {
                return std::nullopt;
            }
            buf_.append(tmp, static_cast<std::size_t>(n));
        }
    }
    bool has_line() const { return buf_.find('\n') != std::string::npos; }

private:
    int fd_;
    std::string buf_;
};

}  // namespace pdx::test
