// The hardening limits (issue 19): probe slots, per-source connections, KV handle and upstream
// body sizes, and --instance-allow.
#include <gtest/gtest.h>

#include "tests/unit/config/config_test_util.hpp"

namespace pdr::config::test {
namespace {

TEST(ConfigHardening, Defaults) {
    auto r = parse(with_instances({}));
    ASSERT_EQ(r.action, ParseOutcome::Action::Run) << r.output;
    const Config& c = r.config;
    EXPECT_EQ(c.reserved_probe_connections, 16u);
    EXPECT_EQ(c.max_connections_per_source, 0u);
    EXPECT_EQ(c.max_kv_params_bytes, std::size_t{4} << 20);
    EXPECT_EQ(c.max_upstream_body_bytes, std::size_t{64} << 20);
    EXPECT_TRUE(c.instance_allow.empty());
    EXPECT_EQ(c.health_backoff_max.count(), 5000);
}

TEST(ConfigHardening, Flags) {
    auto r = parse(
        with_instances({"--reserved-probe-connections", "0", "--max-connections-per-source", "4",
                        "--max-kv-params-bytes", "1000", "--max-upstream-body-bytes", "2048",
                        "--instance-allow", "10.0.0.0/8", "fd00::/8,engine-0.llm", "192.168.1.7"}));
    ASSERT_EQ(r.action, ParseOutcome::Action::Run) << r.output;
    const Config& c = r.config;
    EXPECT_EQ(c.reserved_probe_connections, 0u);
    EXPECT_EQ(c.max_connections_per_source, 4u);
    EXPECT_EQ(c.max_kv_params_bytes, 1000u);
    EXPECT_EQ(c.max_upstream_body_bytes, 2048u);
    EXPECT_EQ(c.instance_allow,
              (std::vector<std::string>{"10.0.0.0/8", "fd00::/8", "engine-0.llm", "192.168.1.7"}));
}

TEST(ConfigHardening, BadAllowEntriesAreRefused) {
    for (const char* bad : {"10.0.0.0/33", "10.0.0.0/", "fd00::/129", "a..b", "[::1]", "1.2.3/8"}) {
        auto r = parse(with_instances({"--instance-allow", bad}));
        EXPECT_EQ(r.action, ParseOutcome::Action::Exit) << bad;
        EXPECT_EQ(r.exit_code, 2) << bad;
        EXPECT_NE(r.output.find("instance-allow"), std::string::npos) << r.output;
    }
}

TEST(AllowList, CidrAddressAndName) {
    const std::vector<std::string> allow{"10.0.0.0/8", "fd00::/8", "127.0.0.1", "Engine-0.llm"};
    EXPECT_TRUE(allow_matches(allow, "10.1.2.3"));
    EXPECT_FALSE(allow_matches(allow, "11.0.0.1"));
    EXPECT_TRUE(allow_matches(allow, "fd12::5"));
    EXPECT_FALSE(allow_matches(allow, "fe80::1"));
    EXPECT_TRUE(allow_matches(allow, "127.0.0.1"));
    EXPECT_FALSE(allow_matches(allow, "127.0.0.2"));
    EXPECT_TRUE(allow_matches(allow, "engine-0.llm"));
    EXPECT_FALSE(allow_matches(allow, "engine-1.llm"));
    EXPECT_FALSE(allow_matches({}, "10.0.0.1"));
    EXPECT_TRUE(allow_matches({"192.168.0.0/23"}, "192.168.1.255"));
    EXPECT_FALSE(allow_matches({"192.168.0.0/23"}, "192.168.2.0"));
    EXPECT_TRUE(allow_matches({"0.0.0.0/0"}, "8.8.8.8"));
}

}  // namespace
}  // namespace pdr::config::test
