#include "router/common/json_depth.hpp"

#include <gtest/gtest.h>

#include <string>

namespace pdr {
namespace {

TEST(JsonDepth, CountsNestingOutsideStrings) {
    EXPECT_TRUE(json_depth_ok(R"({"a":[1,{"b":[]}]})", 4));
    EXPECT_FALSE(json_depth_ok(R"({"a":[1,{"b":[]}]})", 3));
    // Brackets inside strings do not count, escaped quotes do not end a string.
    EXPECT_TRUE(json_depth_ok(R"({"a":"[[[[\"[[[["})", 1));
    // An escaped backslash before the closing quote does end it.
    EXPECT_TRUE(json_depth_ok(R"(["\\",["x"]])", 2));
    EXPECT_FALSE(json_depth_ok(R"(["\\",[["x"]]])", 2));
    EXPECT_TRUE(json_depth_ok("", 0));
    EXPECT_FALSE(json_depth_ok(std::string(kMaxJsonDepth + 1, '[')));
    EXPECT_TRUE(json_depth_ok(std::string(kMaxJsonDepth, '[')));
}

TEST(UntrustedJson, TooDeepOrBrokenIsDiscardedAndGoodTextParses) {
    EXPECT_TRUE(parse_untrusted_json(std::string(100000, '[')).is_discarded());
    EXPECT_TRUE(parse_untrusted_json("{\"a\":").is_discarded());
    auto ok = parse_untrusted_json(R"({"a":[1,2]})");
    ASSERT_TRUE(ok.is_object());
    EXPECT_EQ(ok["a"][1], 2);
}

}  // namespace
}  // namespace pdr
