// Admin API authentication (PROTOCOLS.md §6).
#include "router/api/admin.hpp"

#include <gtest/gtest.h>

namespace pdr::api {
namespace {

// Headers in the order given; a repeated name gives repeated fields.
server::Request with(std::initializer_list<std::pair<std::string, std::string>> hs) {
    server::Request req{http::verb::post, "/instances/add", 11};
    for (const auto& [k, v] : hs) {
        req.insert(k, v);
    }
    return req;
}

TEST(AdminAuth, DisabledWhenNoKeyConfigured) {
    EXPECT_EQ(check_admin_auth(with({{"X-API-Key", "k"}}), ""), AdminAuth::Disabled);
    EXPECT_EQ(check_admin_auth(with({}), ""), AdminAuth::Disabled);
}

TEST(AdminAuth, MissingKey) {
    EXPECT_EQ(check_admin_auth(with({}), "secret"), AdminAuth::Missing);
    EXPECT_EQ(check_admin_auth(with({{"X-API-Key", ""}}), "secret"), AdminAuth::Missing);
    EXPECT_EQ(check_admin_auth(with({{"Authorization", "Basic abc"}}), "secret"),
              AdminAuth::Missing);
    EXPECT_EQ(check_admin_auth(with({{"Authorization", "Bearer "}}), "secret"), AdminAuth::Missing);
}

TEST(AdminAuth, XApiKey) {
    EXPECT_EQ(check_admin_auth(with({{"X-API-Key", "secret"}}), "secret"), AdminAuth::Ok);
    EXPECT_EQ(check_admin_auth(with({{"x-api-key", "secret"}}), "secret"), AdminAuth::Ok);
    EXPECT_EQ(check_admin_auth(with({{"X-API-Key", "wrong"}}), "secret"), AdminAuth::Wrong);
    EXPECT_EQ(check_admin_auth(with({{"X-API-Key", "secret2"}}), "secret"), AdminAuth::Wrong);
    EXPECT_EQ(check_admin_auth(with({{"X-API-Key", "secre"}}), "secret"), AdminAuth::Wrong);
}

TEST(AdminAuth, BearerToken) {
    EXPECT_EQ(check_admin_auth(with({{"Authorization", "Bearer secret"}}), "secret"),
              AdminAuth::Ok);
    EXPECT_EQ(check_admin_auth(with({{"Authorization", "bearer secret"}}), "secret"),
              AdminAuth::Ok);
    EXPECT_EQ(check_admin_auth(with({{"Authorization", "Bearer nope"}}), "secret"),
              AdminAuth::Wrong);
}

TEST(AdminAuth, XApiKeyIsCheckedFirst) {
    EXPECT_EQ(
        check_admin_auth(with({{"X-API-Key", "secret"}, {"Authorization", "Bearer x"}}), "secret"),
        AdminAuth::Ok);
    EXPECT_EQ(
        check_admin_auth(with({{"X-API-Key", "x"}, {"Authorization", "Bearer secret"}}), "secret"),
        AdminAuth::Wrong);
}

TEST(AdminAuth, EmptyXApiKeyLetsTheBearerTokenDecide) {
    EXPECT_EQ(
        check_admin_auth(with({{"X-API-Key", ""}, {"Authorization", "Bearer secret"}}), "secret"),
        AdminAuth::Ok);
    EXPECT_EQ(
        check_admin_auth(with({{"X-API-Key", ""}, {"Authorization", "Bearer nope"}}), "secret"),
        AdminAuth::Wrong);
}

TEST(AdminAuth, RepeatedXApiKeyMustAllBeTheKeyWhateverTheOrder) {
    EXPECT_EQ(check_admin_auth(with({{"X-API-Key", "secret"}, {"X-API-Key", "bad"}}), "secret"),
              AdminAuth::Wrong);
    EXPECT_EQ(check_admin_auth(with({{"X-API-Key", "bad"}, {"X-API-Key", "secret"}}), "secret"),
              AdminAuth::Wrong);
    EXPECT_EQ(check_admin_auth(with({{"X-API-Key", "secret"}, {"X-API-Key", "secret"}}), "secret"),
              AdminAuth::Ok);
    EXPECT_EQ(check_admin_auth(with({{"X-API-Key", ""}, {"X-API-Key", "secret"}}), "secret"),
              AdminAuth::Ok);
}

TEST(ConstantTimeEquals, Basics) {
    EXPECT_TRUE(constant_time_equals("", ""));
    EXPECT_TRUE(constant_time_equals("abc", "abc"));
    EXPECT_FALSE(constant_time_equals("abc", "abd"));
    EXPECT_FALSE(constant_time_equals("abc", "ab"));
    EXPECT_FALSE(constant_time_equals("ab", "abc"));
    EXPECT_FALSE(constant_time_equals("", "a"));
    EXPECT_FALSE(constant_time_equals(std::string_view("a\0b", 3), std::string_view("a\0c", 3)));
}

}  // namespace
}  // namespace pdr::api
