#include "net/common/json_limits.hpp"

#include <gtest/gtest.h>

#include <string>

namespace pdr {
namespace {

TEST(JsonDepth, CountsNestingOutsideStrings) {
    EXPECT_TRUE(json_shape_ok(R"({"a":[1,{"b":[]}]})", 4));
    EXPECT_FALSE(json_shape_ok(R"({"a":[1,{"b":[]}]})", 3));
    // Brackets inside strings do not count, escaped quotes do not end a string.
    EXPECT_TRUE(json_shape_ok(R"({"a":"[[[[\"[[[["})", 1));
    // An escaped backslash before the closing quote does end it.
    EXPECT_TRUE(json_shape_ok(R"(["\\",["x"]])", 2));
    EXPECT_FALSE(json_shape_ok(R"(["\\",[["x"]]])", 2));
    EXPECT_TRUE(json_shape_ok("", 0));
    EXPECT_FALSE(json_shape_ok(std::string(kMaxJsonDepth + 1, '[')));
    EXPECT_TRUE(json_shape_ok(std::string(kMaxJsonDepth, '[')));
}

TEST(JsonShape, CountsObjectMembersOutsideStrings) {
    EXPECT_TRUE(json_shape_ok(R"({"a":1,"b":{"c":2,"d":3}})", kMaxJsonDepth, 2));
    EXPECT_FALSE(json_shape_ok(R"({"a":1,"b":2,"c":3})", kMaxJsonDepth, 2));
    // Colons inside strings and array elements are not members.
    EXPECT_TRUE(json_shape_ok(R"({"a":"x:y:z","b":[1,2,3,4,5]})", kMaxJsonDepth, 2));
    // Each object counts on its own.
    EXPECT_TRUE(json_shape_ok(R"([{"a":1,"b":2},{"a":1,"b":2}])", kMaxJsonDepth, 2));
    std::string wide = "{";
    for (std::size_t i = 0; i <= kMaxJsonObjectMembers; ++i) {
        wide += (i ? ",\"k" : "\"k") + std::to_string(i) + "\":0";
    }
    wide += "}";
    EXPECT_FALSE(json_shape_ok(wide));
    EXPECT_TRUE(parse_untrusted_json(wide).is_discarded());
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
