// The scale-out settings: selection policies, selective disaggregation, DNS discovery.
#include <gtest/gtest.h>

#include "tests/unit/config/config_test_util.hpp"

namespace pdr::config::test {
namespace {

TEST(ConfigScaleOut, Defaults) {
    auto r = parse(with_instances({}));
    ASSERT_EQ(r.action, ParseOutcome::Action::Run) << r.output;
    const Config& c = r.config;
    EXPECT_EQ(c.prefill_policy, Policy::RoundRobin);
    EXPECT_EQ(c.decode_policy, Policy::RoundRobin);
    EXPECT_EQ(c.prefix_affinity_chars, 256u);
    EXPECT_EQ(c.prefix_affinity_slack_pct, 25);
    EXPECT_EQ(c.disagg_min_prompt_chars, 0u);
    EXPECT_EQ(c.disagg_min_prompt_tokens, 0u);
    EXPECT_FALSE(c.fallback_direct);
    EXPECT_EQ(c.prefill_dns.port, 0);
    EXPECT_EQ(c.decode_dns.port, 0);
    EXPECT_EQ(c.dns_refresh.count(), 5000);
    EXPECT_EQ(c.dns_hosts_file, "");
}

TEST(ConfigScaleOut, Flags) {
    auto r = parse(with_instances({"--prefill-policy",
                                   "prefix_affinity",
                                   "--decode-policy",
                                   "LEAST_OUTSTANDING",
                                   "--prefix-affinity-chars",
                                   "64",
                                   "--prefix-affinity-slack-pct",
                                   "50",
                                   "--disagg-min-prompt-chars",
                                   "400",
                                   "--disagg-min-prompt-tokens",
                                   "100",
                                   "--fallback-direct",
                                   "--prefill-dns",
                                   "P.ns.svc:8100",
                                   "--decode-dns=d.ns.svc:8200",
                                   "--dns-refresh-ms",
                                   "1000",
                                   "--dns-hosts-file",
                                   "/tmp/h"}));
    ASSERT_EQ(r.action, ParseOutcome::Action::Run) << r.output;
    const Config& c = r.config;
    EXPECT_EQ(c.prefill_policy, Policy::PrefixAffinity);
    EXPECT_EQ(c.decode_policy, Policy::LeastOutstanding);
    EXPECT_EQ(c.prefix_affinity_chars, 64u);
    EXPECT_EQ(c.prefix_affinity_slack_pct, 50);
    EXPECT_EQ(c.disagg_min_prompt_chars, 400u);
    EXPECT_EQ(c.disagg_min_prompt_tokens, 100u);
    EXPECT_TRUE(c.fallback_direct);
    EXPECT_EQ(c.prefill_dns, (InstanceAddress{"p.ns.svc", 8100}));
    EXPECT_EQ(c.decode_dns, (InstanceAddress{"d.ns.svc", 8200}));
    EXPECT_EQ(c.dns_refresh.count(), 1000);
    EXPECT_EQ(c.dns_hosts_file, "/tmp/h");
    for (auto p : {Policy::RoundRobin, Policy::LeastOutstanding, Policy::PowerOfTwo,
                   Policy::PrefixAffinity}) {
        Policy back{};
        EXPECT_TRUE(parse_policy(to_string(p), back));
        EXPECT_EQ(back, p);
    }
}

TEST(ConfigScaleOut, ConfigFileKeys) {
    TempFile f(".yaml",
               "decode: [127.0.0.1:8200]\nprefill: []\nprefill_dns: prefill.test:8100\n"
               "prefill_policy: power_of_two\nfallback_direct: true\n");
    auto r = parse({"--config", f.path()});
    ASSERT_EQ(r.action, ParseOutcome::Action::Run) << r.output;
    EXPECT_TRUE(r.config.prefill.empty());
    EXPECT_EQ(r.config.prefill_dns, (InstanceAddress{"prefill.test", 8100}));
    EXPECT_EQ(r.config.prefill_policy, Policy::PowerOfTwo);
    EXPECT_TRUE(r.config.fallback_direct);
}

TEST(ConfigScaleOut, DiscoveryStandsInForAList) {
    auto r = parse({"--prefill-dns", "p.test:8100", "--decode-dns", "d.test:8200"});
    EXPECT_EQ(r.action, ParseOutcome::Action::Run) << r.output;
}

TEST(ConfigScaleOut, Errors) {
    expect_error(parse(with_instances({"--prefill-policy", "random"})),
                 "pdrouter: invalid value for --prefill-policy: expected one of "
                 "round_robin, least_outstanding, power_of_two, prefix_affinity");
    expect_error(parse(with_instances({"--decode-policy", "prefix_affinity"})),
                 "pdrouter: invalid value for --decode-policy: expected one of "
                 "round_robin, least_outstanding, power_of_two");
    expect_error(parse(with_instances({"--prefill-dns", "nameonly"})),
                 "pdrouter: invalid value for --prefill-dns: missing port (expected "
                 "HOST:PORT, http://HOST:PORT or [IPv6]:PORT)");
    expect_error(parse(with_instances({"--decode-dns", "http://d.test:80"})),
                 "pdrouter: invalid value for --decode-dns: expected NAME:PORT");
    expect_error(parse(with_instances({"--dns-refresh-ms", "10"})),
                 "pdrouter: invalid value for --dns-refresh-ms: expected an integer "
                 "100..2147483647 (milliseconds)");
}

}  // namespace
}  // namespace pdr::config::test
