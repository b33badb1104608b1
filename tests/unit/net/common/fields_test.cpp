// net/common/fields.hpp: lookups by a walk of the fields give what Beast's own lookups give.
#include "net/common/fields.hpp"

#include <gtest/gtest.h>

namespace pdr {
namespace {

http::fields sample() {
    http::fields f;
    f.insert(http::field::content_type, "application/json");
    f.insert("x-request-id", "first");
    f.insert(http::field::transfer_encoding, "gzip");
    f.insert("X-REQUEST-ID", "second");
    f.insert(http::field::transfer_encoding, "chunked");
    f.insert("X-Other", "o");
    return f;
}

TEST(Fields, FindsByCodeAndByNameInAnyCaseTheFirstOfRepeatedFields) {
    const http::fields f = sample();
    ASSERT_NE(wire::find_field(f, http::field::content_type), nullptr);
    EXPECT_EQ(wire::field_value(f, http::field::content_type), "application/json");
    EXPECT_EQ(wire::field_value(f, std::string_view("Content-Type")), "application/json");
    EXPECT_EQ(wire::field_value(f, std::string_view("X-Request-Id")), "first");
    EXPECT_EQ(wire::field_value(f, http::field::transfer_encoding), "gzip");
    EXPECT_EQ(wire::field_value(f, std::string_view("x-other")), "o");
    // Beast's own lookups agree.
    EXPECT_EQ(f.find("X-Request-Id")->value(), "first");
    EXPECT_EQ(f.find(http::field::transfer_encoding)->value(), "gzip");
}

TEST(Fields, AbsentFieldsAndNamesThatOnlyShareAPrefix) {
    const http::fields f = sample();
    EXPECT_EQ(wire::find_field(f, http::field::host), nullptr);
    EXPECT_EQ(wire::find_field(f, std::string_view("X-Request")), nullptr);
    EXPECT_EQ(wire::find_field(f, std::string_view("X-Request-Idx")), nullptr);
    EXPECT_EQ(wire::field_value(f, http::field::retry_after), "");
    EXPECT_EQ(wire::field_value(http::fields{}, std::string_view("X-Request-Id")), "");
}

TEST(Fields, CountsRepeatedFields) {
    const http::fields f = sample();
    EXPECT_EQ(wire::field_count(f, http::field::transfer_encoding), 2u);
    EXPECT_EQ(wire::field_count(f, http::field::content_type), 1u);
    EXPECT_EQ(wire::field_count(f, http::field::host), 0u);
    EXPECT_EQ(wire::field_count(f, http::field::transfer_encoding),
              static_cast<std::size_t>(
                  std::distance(f.equal_range(http::field::transfer_encoding).first,
                                f.equal_range(http::field::transfer_encoding).second)));
}

}  // namespace
}  // namespace pdr
