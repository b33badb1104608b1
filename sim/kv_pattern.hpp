#pragma once
// What pdsim's KV blocks hold when they move through the transfer core: every block's bytes are
// a deterministic function of (request id, block index inside the request), written by the
// prefill when it holds the blocks and checked word by word by the decode before it generates.
// Also the 64-bit note ids of docs/protocols.md ("pdx engines": pdx_id) and block-range packing.
#include <cstdint>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

namespace pdr::sim {

// The transfer core's 64-bit transfer id of a note about `s`: FNV-1a 64 over its bytes, 0 -> 1.
std::uint64_t pdx_id(std::string_view s) noexcept;

// Word `j` of block `index` of `request_id`: a splitmix64 stream seeded by
// FNV-1a(request_id) ^ index. A block's bytes are its words, little-endian (a trailing partial
// word is cut).
void fill_kv_block(std::span<std::byte> block, std::string_view request_id, std::uint32_t index);
// -1 when `block` holds exactly fill_kv_block's bytes, else the byte offset of the first 8-byte
// word that differs.
std::int64_t check_kv_block(std::span<const std::byte> block, std::string_view request_id,
                            std::uint32_t index);
// Marks a freed block (its first word becomes a value no stream starts with in practice), so a
// later read of it fails verification instead of finding the old request's bytes.
void scrub_kv_block(std::span<std::byte> block);

// [[first, count], ...] runs of `ids` in order (consecutive ids merge).
std::vector<std::pair<std::uint32_t, std::uint32_t>> to_ranges(std::span<const std::uint32_t> ids);

}  // namespace pdr::sim
