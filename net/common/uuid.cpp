#include "net/common/uuid.hpp"

#include <cstdint>
#include <random>

namespace pdr {

namespace {

// xoshiro256** (public-domain algorithm by Blackman and Vigna), seeded from random_device.
class Xoshiro {
public:
    Xoshiro() {
        std::random_device rd;
        for (auto& s : s_) {
            s = (static_cast<std::uint64_t>(rd()) << 32) ^ rd();
        }
        if ((s_[0] | s_[1] | s_[2] | s_[3]) == 0) {
            s_[0] = 0x9E3779B97F4A7C15ULL;
        }
    }
    std::uint64_t next() noexcept {
        const std::uint64_t result = rotl(s_[1] * 5, 7) * 9;
        const std::uint64_t t = s_[1] << 17;
        s_[2] ^= s_[0];
        s_[3] ^= s_[1];
        s_[1] ^= s_[2];
        s_[0] ^= s_[3];
        s_[2] ^= t;
        s_[3] = rotl(s_[3], 45);
        return result;
    }

private:
    static std::uint64_t rotl(std::uint64_t x, int k) noexcept {
        return (x << k) | (x >> (64 - k));
    }
    std::uint64_t s_[4];
};

}  // namespace

std::string make_uuid_v4() {
    thread_local Xoshiro rng;
    std::uint64_t hi = rng.next();
    std::uint64_t lo = rng.next();
    hi = (hi & ~0xF000ULL) | 0x4000ULL;              // version 4
    lo = (lo & ~(0xC0ULL << 56)) | (0x80ULL << 56);  // variant 10xx
    static constexpr char kHex[] = "0123456789abcdef";
    std::string out(36, '-');
    int pos = 0;
    auto put = [&](std::uint64_t v, int nibbles_from, int nibbles_to) {
        for (int i = nibbles_from; i < nibbles_to; ++i) {
            if (pos == 8 || pos == 13 || pos == 18 || pos == 23) {
                ++pos;
            }
            out[static_cast<std::size_t>(pos++)] = kHex[(v >> (60 - 4 * i)) & 0xF];
        }
    };
    put(hi, 0, 16);
    put(lo, 0, 16);
    return out;
}

}  // namespace pdr
