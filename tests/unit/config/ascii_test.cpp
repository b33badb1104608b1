// The ASCII text rules every layer shares (config/ascii.hpp).
#include <gtest/gtest.h>

#include "config/ascii.hpp"

namespace pdr::ascii {
namespace {

static_assert(iequals("Chunked", "cHUNKED"));
static_assert(lower('Q') == 'q' && lower('[') == '[');

TEST(Ascii, IequalsFoldsOnlyAsciiLetters) {
    EXPECT_TRUE(iequals("100-Continue", "100-continue"));
    EXPECT_TRUE(iequals("", ""));
    EXPECT_FALSE(iequals("chunked", "chunke"));
    EXPECT_FALSE(iequals("@", "`"));                // 0x40 and 0x60 are not a case pair
    EXPECT_FALSE(iequals("\xc3\x89", "\xc3\xa9"));  // UTF-8 É and é compare as bytes
}

TEST(Ascii, LowerCopiesWithAsciiLettersFolded) {
    EXPECT_EQ(lower("X-Request-Id"), "x-request-id");
    EXPECT_EQ(lower("\xc3\x89T\xc3\x89"), "\xc3\x89t\xc3\x89");
}

TEST(Ascii, IstartsWith) {
    EXPECT_TRUE(istarts_with("HTTP://host:80", "http://"));
    EXPECT_TRUE(istarts_with("https://h", ""));
    EXPECT_FALSE(istarts_with("http:/", "http://"));
    EXPECT_FALSE(istarts_with("https://h", "http://"));
}

TEST(Ascii, TrimDropsSpacesAndTabsOnly) {
    EXPECT_EQ(trim(" \t chunked\t "), "chunked");
    EXPECT_EQ(trim("a b"), "a b");
    EXPECT_EQ(trim(" \t "), "");
    EXPECT_EQ(trim("\r\nx\n"), "\r\nx\n");  // line ends are not optional whitespace
}

}  // namespace
}  // namespace pdr::ascii
