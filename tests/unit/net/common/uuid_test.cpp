#include "net/common/uuid.hpp"

#include <gtest/gtest.h>

#include <set>
#include <thread>
#include <vector>

namespace pdr {
namespace {

bool is_hex(char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
}

TEST(UuidTest, FormatIsVersion4) {
    for (int i = 0; i < 1000; ++i) {
        std::string u = make_uuid_v4();
        ASSERT_EQ(u.size(), 36u);
        for (std::size_t k = 0; k < u.size(); ++k) {
            if (k == 8 || k == 13 || k == 18 || k == 23) {
                ASSERT_EQ(u[k], '-') << u;
            } else {
                ASSERT_TRUE(is_hex(u[k])) << u;
            }
        }
        EXPECT_EQ(u[14], '4') << u;
        EXPECT_TRUE(u[19] == '8' || u[19] == '9' || u[19] == 'a' || u[19] == 'b') << u;
    }
}

TEST(UuidTest, UniqueAcrossThreads) {
    constexpr int kThreads = 4;
    constexpr int kEach = 5000;
    std::vector<std::vector<std::string>> out(kThreads);
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
        threads.emplace_back([&out, t] {
            for (int i = 0; i < kEach; ++i) {
                out[static_cast<std::size_t>(t)].push_back(make_uuid_v4());
            }
        });
    }
    for (auto& th : threads) {
        th.join();
    }
    std::set<std::string> all;
    for (auto& v : out) {
        all.insert(v.begin(), v.end());
    }
    EXPECT_EQ(all.size(), static_cast<std::size_t>(kThreads * kEach));
}

}  // namespace
}  // namespace pdr
