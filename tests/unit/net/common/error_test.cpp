#include "net/common/error.hpp"

#include <nlohmann/json.hpp>

#include <gtest/gtest.h>

#include <set>

namespace pdr {
namespace {

namespace http = boost::beast::http;

TEST(ErrorTest, TableMapsStatusTypeAndCode) {
    auto bad = error_info(Errc::BadJson);
    EXPECT_EQ(bad.status, http::status::bad_request);
    EXPECT_EQ(bad.type, "invalid_request_error");
    EXPECT_EQ(bad.code, "invalid_json");
    auto up = error_info(Errc::UpstreamConnect);
    EXPECT_EQ(up.status, http::status::bad_gateway);
    EXPECT_EQ(up.type, "server_error");
    EXPECT_EQ(up.code, "upstream_connect_error");
    EXPECT_EQ(error_info(Errc::BodyTooLarge).status, http::status::payload_too_large);
    EXPECT_EQ(error_info(Errc::HeadersTooLarge).status,
              http::status::request_header_fields_too_large);
    EXPECT_EQ(error_info(Errc::UpstreamTimeout).status, http::status::gateway_timeout);
    EXPECT_EQ(error_info(Errc::NoDecodeInstance).status, http::status::service_unavailable);
    EXPECT_EQ(error_info(Errc::TooManyRequests).status, http::status::too_many_requests);
    EXPECT_EQ(error_info(Errc::Internal).status, http::status::internal_server_error);
}

TEST(ErrorTest, CodesAreUniqueAndSnakeCase) {
    std::set<std::string_view> seen;
    for (int i = 1; i <= static_cast<int>(Errc::BadHttp); ++i) {
        auto info = error_info(static_cast<Errc>(i));
        EXPECT_TRUE(seen.insert(info.code).second) << info.code;
        EXPECT_FALSE(info.type.empty());
        EXPECT_GE(static_cast<int>(info.status), 400);
        for (char c : info.code) {
            EXPECT_TRUE((c >= 'a' && c <= 'z') || c == '_') << info.code;
        }
    }
}

TEST(ErrorTest, ErrorCodeInterop) {
    boost::system::error_code ec = Errc::NotFound;
    EXPECT_EQ(&ec.category(), &router_category());
    EXPECT_TRUE(ec == Errc::NotFound);
    EXPECT_FALSE(ec == Errc::Forbidden);
    EXPECT_FALSE(ec.message().empty());
    EXPECT_STREQ(router_category().name(), "pdr");
}

TEST(ErrorTest, OpenAiBodyShape) {
    auto j = nlohmann::json::parse(openai_error_body(Errc::MissingField, "no \"model\"", "model"));
    ASSERT_TRUE(j.contains("error"));
    const auto& e = j["error"];
    EXPECT_EQ(e["message"], "no \"model\"");
    EXPECT_EQ(e["type"], "invalid_request_error");
    EXPECT_EQ(e["param"], "model");
    EXPECT_EQ(e["code"], "missing_field");
    EXPECT_EQ(e.size(), 4u);

    auto k = nlohmann::json::parse(openai_error_body(Errc::UpstreamClosed, "gone"));
    EXPECT_TRUE(k["error"]["param"].is_null());
    EXPECT_EQ(k["error"]["type"], "server_error");
}

TEST(ErrorTest, InvalidUtf8DoesNotThrow) {
    std::string bad = "x\xff\xfe";
    EXPECT_NO_THROW({
        auto body = openai_error_body(Errc::BadJson, bad);
        EXPECT_TRUE(nlohmann::json::accept(body));
    });
}

TEST(ErrorTest, SseEvent) {
    std::string ev = openai_error_event(Errc::UpstreamTimeout, "slow");
    ASSERT_GT(ev.size(), 8u);
    EXPECT_EQ(ev.substr(0, 6), "data: ");
    EXPECT_EQ(ev.substr(ev.size() - 2), "\n\n");
    auto j = nlohmann::json::parse(ev.substr(6, ev.size() - 8));
    EXPECT_EQ(j["error"]["code"], "upstream_timeout");
}

}  // namespace
}  // namespace pdr
