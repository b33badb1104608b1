#include "sim/kv_pattern.hpp"

#include "sim/generation.hpp"

#include <algorithm>
#include <cstring>

namespace pdr::sim {

namespace {

constexpr std::uint64_t kGamma = 0x9e3779b97f4a7c15ULL;
constexpr std::uint64_t kScrubbed = 0xdeadf7eedeadf7eeULL;

std::uint64_t seed_of(std::string_view request_id, std::uint32_t index) {
    return fnv1a64(request_id) ^ index;
}

std::uint64_t word_at(std::uint64_t seed, std::size_t j) {
    return mix64(seed + (j + 1) * kGamma);
}

}  // namespace

std::uint64_t pdx_id(std::string_view s) noexcept {
    const std::uint64_t h = fnv1a64(s);
    return h == 0 ? 1 : h;
}

void fill_kv_block(std::span<std::byte> block, std::string_view request_id, std::uint32_t index) {
    const std::uint64_t seed = seed_of(request_id, index);
    const std::size_t words = block.size() / 8;
    for (std::size_t j = 0; j < words; ++j) {
        const std::uint64_t w = word_at(seed, j);
        std::memcpy(block.data() + j * 8, &w, 8);
    }
    if (const std::size_t tail = block.size() % 8; tail != 0) {
        const std::uint64_t w = word_at(seed, words);
        std::memcpy(block.data() + words * 8, &w, tail);
    }
}

std::int64_t check_kv_block(std::span<const std::byte> block, std::string_view request_id,
                            std::uint32_t index) {
    const std::uint64_t seed = seed_of(request_id, index);
    const std::size_t words = block.size() / 8;
    for (std::size_t j = 0; j < words; ++j) {
        std::uint64_t w = 0;
        std::memcpy(&w, block.data() + j * 8, 8);
        if (w != word_at(seed, j)) {
            return static_cast<std::int64_t>(j * 8);
        }
    }
    if (const std::size_t tail = block.size() % 8; tail != 0) {
        const std::uint64_t expect = word_at(seed, words);
        if (std::memcmp(block.data() + words * 8, &expect, tail) != 0) {
            return static_cast<std::int64_t>(words * 8);
        }
    }
    return -1;
}

void scrub_kv_block(std::span<std::byte> block) {
    std::memcpy(block.data(), &kScrubbed, std::min<std::size_t>(8, block.size()));
}

std::vector<std::pair<std::uint32_t, std::uint32_t>> to_ranges(std::span<const std::uint32_t> ids) {
    std::vector<std::pair<std::uint32_t, std::uint32_t>> out;
    for (std::uint32_t id : ids) {
        if (!out.empty() && out.back().first + out.back().second == id) {
            ++out.back().second;
        } else {
            out.emplace_back(id, 1);
        }
    }
    return out;
}

}  // namespace pdr::sim
