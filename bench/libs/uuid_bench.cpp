// Request-id generation: the hand-written generator (xoshiro256** + hand formatting, as
// net/common/uuid.cpp had it before libs-eval) against Boost.Uuid's generators, in one run.
// Build and run: bench/libs/run.sh.
// Prints ns per id (best of 7 interleaved rounds of 1M ids; 100k for getrandom) and checks that
// every generator's text has the form the tests expect (36 characters, lower-case hex, version 4,
// variant 10xx).
#include <boost/uuid/random_generator.hpp>
#include <boost/uuid/uuid_io.hpp>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <random>
#include <regex>
#include <string>
#include <vector>

namespace {

class Xoshiro {
public:
    Xoshiro() {
        std::random_device rd;
        for (auto& s : s_) {
            s = (static_cast<std::uint64_t>(rd()) << 32) ^ rd();
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

std::string hand_written() {
    thread_local Xoshiro rng;
    std::uint64_t hi = rng.next();
    std::uint64_t lo = rng.next();
    hi = (hi & ~0xF000ULL) | 0x4000ULL;
    lo = (lo & ~(0xC0ULL << 56)) | (0x80ULL << 56);
    static constexpr char kHex[] = "0123456789abcdef";
    std::string out(36, '-');
    int pos = 0;
    auto put = [&](std::uint64_t v) {
        for (int i = 0; i < 16; ++i) {
            if (pos == 8 || pos == 13 || pos == 18 || pos == 23) {
                ++pos;
            }
            out[static_cast<std::size_t>(pos++)] = kHex[(v >> (60 - 4 * i)) & 0xF];
        }
    };
    put(hi);
    put(lo);
    return out;
}

std::string boost_mt19937() {
    thread_local boost::uuids::random_generator_mt19937 gen;
    return boost::uuids::to_string(gen());
}

std::string boost_os_entropy() {  // random_generator: getrandom(2) for every id
    thread_local boost::uuids::random_generator gen;
    return boost::uuids::to_string(gen());
}

struct Case {
    const char* name;
    std::string (*make)();
    int n;  // ids per round
    double best_ns = 1e30;
};

// Best ns per id of each case over 7 rounds that interleave the cases (a burst of load from
// other processes on the shared machine then hits all of them alike).
void measure(std::vector<Case>& cases) {
    std::size_t sink = 0;
    for (int round = 0; round < 7; ++round) {
        for (Case& c : cases) {
            const auto t0 = std::chrono::steady_clock::now();
            for (int i = 0; i < c.n; ++i) {
                sink += static_cast<unsigned char>(c.make()[35]);
            }
            const auto t1 = std::chrono::steady_clock::now();
            c.best_ns = std::min(c.best_ns,
                                 std::chrono::duration<double, std::nano>(t1 - t0).count() / c.n);
        }
    }
    if (sink == 1) {
        std::puts("");
    }
}

}  // namespace

int main() {
    const std::regex form("[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}");
    std::vector<Case> cases = {{"hand-written xoshiro256**", hand_written, 1000000},
                               {"boost random_generator_mt19937", boost_mt19937, 1000000},
                               {"boost random_generator (getrandom)", boost_os_entropy, 100000}};
    for (const Case& c : cases) {
        for (int i = 0; i < 10000; ++i) {
            const std::string u = c.make();
            if (!std::regex_match(u, form)) {
                std::printf("%s: bad form '%s'\n", c.name, u.c_str());
                return 1;
            }
        }
    }
    measure(cases);
    for (const Case& c : cases) {
        std::printf("%-36s %7.1f ns/id  e.g. %s\n", c.name, c.best_ns, c.make().c_str());
    }
}
