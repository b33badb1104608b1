#include "sim/kv_store.hpp"
#include "sim/kv_pattern.hpp"

#include <gtest/gtest.h>

#include <set>

namespace pdr::sim {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

TEST(BlockChecksum, DeterministicAndSensitive) {
    const std::vector<std::int64_t> ids{1, 2, 3};
    const auto c = block_checksum("engine-a", ids, 4096);
    EXPECT_EQ(c.size(), 16u);
    EXPECT_EQ(c, block_checksum("engine-a", ids, 4096));
    EXPECT_NE(c, block_checksum("engine-b", ids, 4096));
    EXPECT_NE(c, block_checksum("engine-a", {1, 2, 4}, 4096));
    EXPECT_NE(c, block_checksum("engine-a", {3, 2, 1}, 4096));
    EXPECT_NE(c, block_checksum("engine-a", ids, 2048));
}

TEST(BlockStore, HoldGivesUniqueIds) {
    BlockStore s("e", 64);
    const auto t0 = Clock::now();
    auto a = s.hold("r1", 3, t0 + seconds(30));
    auto b = s.hold("r2", 2, t0 + seconds(30));
    ASSERT_EQ(a.size(), 3u);
    ASSERT_EQ(b.size(), 2u);
    std::set<std::int64_t> all(a.begin(), a.end());
    all.insert(b.begin(), b.end());
    EXPECT_EQ(all.size(), 5u);
    EXPECT_EQ(s.blocks_held(), 5u);
    EXPECT_EQ(s.requests_held(), 2u);
    EXPECT_TRUE(s.holds("r1"));
}

TEST(BlockStore, ReadFreesAndReturnsChecksum) {
    BlockStore s("engine", 128);
    const auto t0 = Clock::now();
    auto ids = s.hold("r", 4, t0 + seconds(30));
    auto r = s.read("r", ids);
    EXPECT_EQ(r.status, BlockStore::ReadStatus::Ok);
    EXPECT_EQ(r.blocks, 4u);
    EXPECT_EQ(r.bytes, 4u * 128u);
    EXPECT_EQ(r.checksum, block_checksum("engine", ids, 128));
    EXPECT_EQ(s.blocks_held(), 0u);
    EXPECT_EQ(s.counters().freed_by_read, 1u);
    EXPECT_EQ(s.read("r", ids).status, BlockStore::ReadStatus::NotHeld);
    EXPECT_EQ(s.counters().freed_by_read, 1u);
}

TEST(BlockStore, ReadAllWhenNoIdsAndMismatchKeepsBlocks) {
    BlockStore s("e", 8);
    const auto t0 = Clock::now();
    auto ids = s.hold("r", 2, t0 + seconds(30));
    EXPECT_EQ(s.read("r", {ids[0], 999}).status, BlockStore::ReadStatus::BlockMismatch);
    EXPECT_EQ(s.blocks_held(), 2u);
    auto r = s.read("r", {});
    EXPECT_EQ(r.status, BlockStore::ReadStatus::Ok);
    EXPECT_EQ(r.blocks, 2u);
    EXPECT_EQ(r.checksum, block_checksum("e", ids, 8));
}

TEST(BlockStore, ReleaseCountsAbort) {
    BlockStore s("e", 8);
    s.hold("r", 2, Clock::now() + seconds(30));
    EXPECT_TRUE(s.release("r"));
    EXPECT_FALSE(s.release("r"));
    EXPECT_EQ(s.counters().freed_by_abort, 1u);
    EXPECT_EQ(s.blocks_held(), 0u);
}

TEST(BlockStore, HoldingSameIdAgainReplacesOldBlocks) {
    BlockStore s("e", 8);
    const auto t0 = Clock::now();
    auto a = s.hold("r", 2, t0 + seconds(30));
    auto b = s.hold("r", 3, t0 + seconds(30));
    EXPECT_NE(a[0], b[0]);
    EXPECT_EQ(s.blocks_held(), 3u);
    EXPECT_EQ(s.requests_held(), 1u);
    EXPECT_EQ(s.counters().freed_by_abort, 1u);
}

TEST(BlockStore, LeaseExpiryAndRefresh) {
    BlockStore s("e", 8);
    const auto t0 = Clock::now();
    s.hold("a", 1, t0 + milliseconds(100));
    s.hold("b", 2, t0 + milliseconds(200));
    ASSERT_TRUE(s.next_expiry().has_value());
    EXPECT_EQ(*s.next_expiry(), t0 + milliseconds(100));

    EXPECT_EQ(s.expire(t0 + milliseconds(99)), 0u);
    // Refresh "a" just before it expires: pushed to t0 + 350 ms.
    EXPECT_TRUE(s.refresh("a", t0 + milliseconds(350)));
    EXPECT_FALSE(s.refresh("nope", t0 + milliseconds(350)));
    EXPECT_EQ(s.expire(t0 + milliseconds(150)), 0u);
    EXPECT_EQ(*s.next_expiry(), t0 + milliseconds(200));

    EXPECT_EQ(s.expire(t0 + milliseconds(200)), 1u);  // "b" (expiry is inclusive)
    EXPECT_FALSE(s.holds("b"));
    EXPECT_TRUE(s.holds("a"));
    EXPECT_EQ(s.blocks_held(), 1u);
    EXPECT_EQ(s.expire(t0 + milliseconds(400)), 1u);
    EXPECT_EQ(s.counters().freed_by_expiry, 2u);
    EXPECT_EQ(s.blocks_held(), 0u);
    EXPECT_FALSE(s.next_expiry().has_value());
    EXPECT_EQ(s.read("a", {}).status, BlockStore::ReadStatus::NotHeld);
}

TEST(BlockStore, ResetDropsEverything) {
    BlockStore s("e", 8);
    s.hold("a", 3, Clock::now() + seconds(1));
    s.release("a");
    s.hold("b", 3, Clock::now() + seconds(1));
    s.reset();
    EXPECT_EQ(s.blocks_held(), 0u);
    EXPECT_EQ(s.requests_held(), 0u);
    EXPECT_EQ(s.counters().freed_by_abort, 0u);
    EXPECT_FALSE(s.holds("b"));
}

TEST(BlockStore, PoolIsBoundedAndHandsOutTheOldestFreedFirst) {
    BlockStore s("e", 8, 4);
    std::vector<std::uint32_t> scrubbed;
    s.set_free_hook([&](std::uint32_t id) { scrubbed.push_back(id); });
    auto a = s.hold("a", 3, Clock::now() + seconds(30));
    EXPECT_EQ(a, (std::vector<std::int64_t>{0, 1, 2}));
    EXPECT_TRUE(s.hold("b", 2, Clock::now() + seconds(30)).empty());  // 1 free
    EXPECT_EQ(s.counters().pool_exhausted, 1u);
    EXPECT_FALSE(s.holds("b"));
    auto t = s.take(1);
    ASSERT_TRUE(t);
    EXPECT_EQ(*t, std::vector<std::uint32_t>{3});
    EXPECT_EQ(s.blocks_taken(), 1u);
    EXPECT_FALSE(s.take(1));
    EXPECT_TRUE(s.release_consumed("a"));
    EXPECT_EQ(s.counters().freed_by_read, 1u);
    EXPECT_EQ(scrubbed, (std::vector<std::uint32_t>{0, 1, 2}));
    s.give(*t);
    EXPECT_EQ(s.blocks_free(), 4u);
    EXPECT_EQ(s.blocks_taken(), 0u);
    EXPECT_EQ(*s.take(4), (std::vector<std::uint32_t>{0, 1, 2, 3}));  // oldest freed first
}

TEST(KvPattern, FillCheckAndScrub) {
    std::vector<std::byte> b(4099);  // a partial last word too
    fill_kv_block(b, "req-1", 7);
    EXPECT_EQ(check_kv_block(b, "req-1", 7), -1);
    EXPECT_EQ(check_kv_block(b, "req-1", 6), 0);  // another index
    EXPECT_EQ(check_kv_block(b, "req-2", 7), 0);  // another request
    b[4098] ^= std::byte{1};
    EXPECT_EQ(check_kv_block(b, "req-1", 7), 4096);
    fill_kv_block(b, "req-1", 7);
    b[1000] ^= std::byte{0x80};
    EXPECT_EQ(check_kv_block(b, "req-1", 7), 1000 / 8 * 8);
    fill_kv_block(b, "req-1", 7);
    scrub_kv_block(b);
    EXPECT_EQ(check_kv_block(b, "req-1", 7), 0);
}

TEST(KvPattern, IdsAndRanges) {
    EXPECT_EQ(pdx_id(""), 0xcbf29ce484222325ULL);  // FNV-1a offset basis
    EXPECT_EQ(pdx_id("a"), 0xaf63dc4c8601ec8cULL);
    EXPECT_NE(pdx_id("xfer-1"), pdx_id("xfer-2"));
    const std::vector<std::uint32_t> ids{4, 5, 6, 9, 10, 2};
    using R = std::vector<std::pair<std::uint32_t, std::uint32_t>>;
    EXPECT_EQ(to_ranges(ids), (R{{4, 3}, {9, 2}, {2, 1}}));
    EXPECT_TRUE(to_ranges({}).empty());
}

}  // namespace
}  // namespace pdr::sim
