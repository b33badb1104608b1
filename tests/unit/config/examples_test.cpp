// The shipped example files parse, and carry the documented defaults.
#include <gtest/gtest.h>

#include "tests/unit/config/config_test_util.hpp"

namespace pdr::config::test {
namespace {

using Strings = std::vector<std::string>;

class ConfigExamples : public ::testing::TestWithParam<const char*> {};

TEST_P(ConfigExamples, ParsesWithDefaults) {
    std::string path = std::string(PDR_TEST_SOURCE_DIR) + "/config/examples/" + GetParam();
    auto r = parse({"--config", path});
    ASSERT_EQ(r.action, ParseOutcome::Action::Run) << r.output;
    const Config& c = r.config;
    Config d;
    EXPECT_EQ(texts(c.prefill), (Strings{"127.0.0.1:8100", "127.0.0.1:8101"}));
    EXPECT_EQ(texts(c.decode), (Strings{"127.0.0.1:8200", "[::1]:8201"}));
    // The examples spell out the defaults; keep them in sync with Config.
    EXPECT_EQ(c.host, d.host);
    EXPECT_EQ(c.port, d.port);
    EXPECT_EQ(c.connect_timeout, d.connect_timeout);
    EXPECT_EQ(c.prefill_timeout, d.prefill_timeout);
    EXPECT_EQ(c.decode_timeout, d.decode_timeout);
    EXPECT_EQ(c.decode_idle_timeout, d.decode_idle_timeout);
    EXPECT_EQ(c.request_read_timeout, d.request_read_timeout);
    EXPECT_EQ(c.client_idle_timeout, d.client_idle_timeout);
    EXPECT_EQ(c.upstream_idle_timeout, d.upstream_idle_timeout);
    EXPECT_EQ(c.shutdown_grace, d.shutdown_grace);
    EXPECT_EQ(c.kv_lease_timeout, d.kv_lease_timeout);
    EXPECT_EQ(c.lease_route_recheck, d.lease_route_recheck);
    EXPECT_EQ(c.health_interval, d.health_interval);
    EXPECT_EQ(c.health_backoff_max, d.health_backoff_max);
    EXPECT_EQ(c.max_body_bytes, d.max_body_bytes);
    EXPECT_EQ(c.max_header_bytes, d.max_header_bytes);
    EXPECT_EQ(c.max_concurrent_requests, d.max_concurrent_requests);
    EXPECT_EQ(c.max_client_connections, d.max_client_connections);
    EXPECT_EQ(c.on_missing_kv_params, d.on_missing_kv_params);
    EXPECT_EQ(c.rewrite_kv_host, d.rewrite_kv_host);
    EXPECT_EQ(c.pass_through_role, d.pass_through_role);
    EXPECT_EQ(c.expose_decode_kv_params, d.expose_decode_kv_params);
    EXPECT_EQ(c.prefill_retries, d.prefill_retries);
    EXPECT_EQ(c.decode_retries, d.decode_retries);
    EXPECT_EQ(c.lease_refresh, d.lease_refresh);
    EXPECT_EQ(c.log_level, d.log_level);
    EXPECT_EQ(c.log_format, d.log_format);
    EXPECT_EQ(c.demo, d.demo);
    EXPECT_EQ(c.demo_token_delay, d.demo_token_delay);
}

INSTANTIATE_TEST_SUITE_P(Files, ConfigExamples, ::testing::Values("router.yaml", "router.json"));

}  // namespace
}  // namespace pdr::config::test
