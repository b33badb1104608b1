// Every command-line flag, lists, aliases, --help and --version.
#include <gtest/gtest.h>

#include "tests/unit/config/config_test_util.hpp"

namespace pdr::config::test {
namespace {

using Strings = std::vector<std::string>;

TEST(ConfigFlags, DefaultsWithOnlyInstances) {
    auto r = parse(with_instances({}));
    ASSERT_EQ(r.action, ParseOutcome::Action::Run) << r.output;
    const Config& c = r.config;
    Config d;
    EXPECT_EQ(c.host, "0.0.0.0");
    EXPECT_EQ(c.port, 8000);
    EXPECT_EQ(c.port_file, "");
    EXPECT_EQ(c.model, "");
    EXPECT_EQ(c.admin_api_key, "");
    EXPECT_EQ(c.upstream_api_key, "");
    EXPECT_EQ(c.connect_timeout, d.connect_timeout);
    EXPECT_EQ(c.connect_timeout.count(), 3000);
    EXPECT_EQ(c.prefill_timeout.count(), 300000);
    EXPECT_EQ(c.decode_timeout.count(), 300000);
    EXPECT_EQ(c.decode_idle_timeout.count(), 120000);
    EXPECT_EQ(c.request_read_timeout.count(), 30000);
    EXPECT_EQ(c.client_idle_timeout.count(), 75000);
    EXPECT_EQ(c.upstream_idle_timeout.count(), 4000);
    EXPECT_EQ(c.shutdown_grace.count(), 10000);
    EXPECT_EQ(c.kv_lease_timeout.count(), 30000);
    EXPECT_TRUE(c.lease_refresh);
    EXPECT_EQ(c.health_interval.count(), 5000);
    EXPECT_EQ(c.health_backoff_max.count(), 5000);
    EXPECT_EQ(c.max_body_bytes, 8u << 20);
    EXPECT_EQ(c.max_header_bytes, 16u << 10);
    EXPECT_EQ(c.max_concurrent_requests, 1024u);
    EXPECT_EQ(c.max_client_connections, 10000u);
    EXPECT_EQ(c.on_missing_kv_params, OnMissingKvParams::Error);
    EXPECT_EQ(c.rewrite_kv_host, RewriteKvHost::Auto);
    EXPECT_EQ(c.pass_through_role, Role::Decode);
    EXPECT_FALSE(c.expose_decode_kv_params);
    EXPECT_EQ(c.prefill_retries, 1);
    EXPECT_EQ(c.decode_retries, 1);
    EXPECT_EQ(c.log_level, log::Level::Info);
    EXPECT_EQ(c.log_format, log::Format::Text);
    EXPECT_FALSE(c.demo);
    EXPECT_EQ(c.demo_token_delay.count(), 20);
    EXPECT_EQ(c.config_file, "");
    EXPECT_EQ(texts(c.prefill), Strings{"127.0.0.1:8100"});
    EXPECT_EQ(texts(c.decode), Strings{"127.0.0.1:8200"});
}

TEST(ConfigFlags, EveryValueFlag) {
    auto r = parse(with_instances({
        "--host",
        "127.0.0.1",
        "--port",
        "0",
        "--port-file",
        "/tmp/p",
        "--model",
        "m1",
        "--admin-api-key",
        "adm",
        "--upstream-api-key",
        "up",
        "--connect-timeout-ms",
        "11",
        "--prefill-timeout-ms",
        "12",
        "--decode-timeout-ms",
        "13",
        "--decode-idle-timeout-ms",
        "14",
        "--request-read-timeout-ms",
        "15",
        "--client-idle-timeout-ms",
        "16",
        "--client-write-timeout-ms",
        "22",
        "--upstream-idle-timeout-ms",
        "21",
        "--shutdown-grace-ms",
        "0",
        "--kv-lease-timeout-ms",
        "1700",
        "--health-interval-ms",
        "18",
        "--health-backoff-max-ms",
        "19",
        "--max-body-bytes",
        "1000",
        "--max-header-bytes",
        "2000",
        "--max-concurrent-requests",
        "3",
        "--max-client-connections",
        "5",
        "--on-missing-kv-params",
        "recompute",
        "--rewrite-kv-host",
        "ALWAYS",
        "--pass-through-role",
        "prefill",
        "--expose-decode-kv-params",
        "--prefill-retries",
        "0",
        "--decode-retries",
        "4",
        "--no-lease-refresh",
        "--log-level",
        "debug",
        "--log-format",
        "json",
        "--demo-token-delay-ms",
        "0",
    }));
    ASSERT_EQ(r.action, ParseOutcome::Action::Run) << r.output;
    const Config& c = r.config;
    EXPECT_EQ(c.host, "127.0.0.1");
    EXPECT_EQ(c.port, 0);
    EXPECT_EQ(c.port_file, "/tmp/p");
    EXPECT_EQ(c.model, "m1");
    EXPECT_EQ(c.admin_api_key, "adm");
    EXPECT_EQ(c.upstream_api_key, "up");
    EXPECT_EQ(c.connect_timeout.count(), 11);
    EXPECT_EQ(c.prefill_timeout.count(), 12);
    EXPECT_EQ(c.decode_timeout.count(), 13);
    EXPECT_EQ(c.decode_idle_timeout.count(), 14);
    EXPECT_EQ(c.request_read_timeout.count(), 15);
    EXPECT_EQ(c.client_idle_timeout.count(), 16);
    EXPECT_EQ(c.client_write_timeout.count(), 22);
    EXPECT_EQ(c.upstream_idle_timeout.count(), 21);
    EXPECT_EQ(c.shutdown_grace.count(), 0);
    EXPECT_EQ(c.kv_lease_timeout.count(), 1700);
    EXPECT_EQ(c.health_interval.count(), 18);
    EXPECT_EQ(c.health_backoff_max.count(), 19);
    EXPECT_EQ(c.max_body_bytes, 1000u);
    EXPECT_EQ(c.max_header_bytes, 2000u);
    EXPECT_EQ(c.max_concurrent_requests, 3u);
    EXPECT_EQ(c.max_client_connections, 5u);
    EXPECT_EQ(c.on_missing_kv_params, OnMissingKvParams::Recompute);
    EXPECT_EQ(c.rewrite_kv_host, RewriteKvHost::Always);
    EXPECT_EQ(c.pass_through_role, Role::Prefill);
    EXPECT_TRUE(c.expose_decode_kv_params);
    EXPECT_EQ(c.prefill_retries, 0);
    EXPECT_EQ(c.decode_retries, 4);
    EXPECT_FALSE(c.lease_refresh);
    EXPECT_EQ(c.log_level, log::Level::Debug);
    EXPECT_EQ(c.log_format, log::Format::Json);
    EXPECT_FALSE(c.demo);
    EXPECT_EQ(c.demo_token_delay.count(), 0);
}

TEST(ConfigFlags, DemoRunsItsOwnInstancesOnly) {
    auto r = parse({"--demo", "--demo-token-delay-ms", "0"});
    ASSERT_EQ(r.action, ParseOutcome::Action::Run) << r.output;
    EXPECT_TRUE(r.config.demo);
    EXPECT_TRUE(r.config.prefill.empty());
    for (const auto& extra :
         {Strings{"--prefill", "127.0.0.1:1"}, Strings{"--decode", "127.0.0.1:1"},
          Strings{"--decoder-ports", "8201"}}) {
        Strings args{"--demo"};
        args.insert(args.end(), extra.begin(), extra.end());
        auto bad = parse(args);
        EXPECT_EQ(bad.exit_code, 2) << extra[0];
        EXPECT_NE(bad.output.find("--demo runs its own"), std::string::npos) << bad.output;
    }
}

TEST(ConfigFlags, HostIsCheckedAndLosesItsBrackets) {
    auto r = parse(with_instances({"--host", "[::1]"}));
    ASSERT_EQ(r.action, ParseOutcome::Action::Run) << r.output;
    EXPECT_EQ(r.config.host, "::1");
    for (const char* bad : {"notan/ip", "999.1.1.1", "a..b", " 127.0.0.1", "[::1", "::1]"}) {
        auto b = parse(with_instances({"--host", bad}));
        EXPECT_EQ(b.exit_code, 2) << bad;
        EXPECT_NE(b.output.find("for --host"), std::string::npos) << b.output;
    }
}

TEST(ConfigFlags, PortFileDirectoryIsCheckedBeforeStart) {
    auto missing = parse(with_instances({"--port-file", "/nonexistent-pdr-dir/p"}));
    EXPECT_EQ(missing.exit_code, 2);
    EXPECT_NE(missing.output.find("does not exist or is not writable"), std::string::npos)
        << missing.output;
    auto dir = parse(with_instances({"--port-file", "/tmp"}));
    EXPECT_EQ(dir.exit_code, 2);
    EXPECT_NE(dir.output.find("a directory"), std::string::npos) << dir.output;
}

TEST(ConfigFlags, ControlCharactersInTextValuesAreRefusedWithoutEchoingThem) {
    auto r = parse(with_instances({"--upstream-api-key", "sk-abc\r\nX-Injected: yes"}));
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_NE(r.output.find("--upstream-api-key"), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("sk-abc"), std::string::npos) << "a key is not printed";
    auto env = parse(with_instances({}), {{"OPENAI_API_KEY", "sk-abc\n"}});
    EXPECT_EQ(env.exit_code, 2);
    EXPECT_NE(env.output.find("environment variable OPENAI_API_KEY"), std::string::npos)
        << env.output;
}

TEST(ConfigFlags, AQuotedSpaceSeparatedListIsSeveralInstances) {
    auto r =
        parse({"--prefill", "127.0.0.1:1 127.0.0.1:2", "--decode", " 127.0.0.1:3\t127.0.0.1:4 "});
    ASSERT_EQ(r.action, ParseOutcome::Action::Run) << r.output;
    EXPECT_EQ(texts(r.config.prefill), (Strings{"127.0.0.1:1", "127.0.0.1:2"}));
    EXPECT_EQ(texts(r.config.decode), (Strings{"127.0.0.1:3", "127.0.0.1:4"}));
}

TEST(ConfigFlags, EqualsFormAndLastWins) {
    auto r = parse(with_instances({"--port=9000", "--port", "9001", "--log-level=warn",
                                   "--model=", "--demo=false", "--lease-refresh=no"}));
    ASSERT_EQ(r.action, ParseOutcome::Action::Run) << r.output;
    EXPECT_EQ(r.config.port, 9001);
    EXPECT_EQ(r.config.log_level, log::Level::Warn);
    EXPECT_EQ(r.config.model, "");
    EXPECT_FALSE(r.config.demo);
    EXPECT_FALSE(r.config.lease_refresh);
    EXPECT_EQ(parse(with_instances({"--log-level", "ERROR"})).config.log_level, log::Level::Error);
    EXPECT_EQ(parse(with_instances({"--log-level", "info"})).config.log_level, log::Level::Info);
    auto e = parse(with_instances({"--on-missing-kv-params=error"}));
    EXPECT_EQ(e.config.on_missing_kv_params, OnMissingKvParams::Error);
    EXPECT_EQ(parse(with_instances({})).config.kv_mode, KvMode::Pull);
    auto m = parse(with_instances({"--kv-mode", "PULL"}));
    EXPECT_EQ(m.action, ParseOutcome::Action::Run) << m.output;
    EXPECT_EQ(m.config.kv_mode, KvMode::Pull);
    EXPECT_EQ(to_string(m.config.kv_mode), "pull");
    EXPECT_EQ(parse(with_instances({"--log-format", "text"})).config.log_format, log::Format::Text);
}

TEST(ConfigFlags, InstanceListsSpacesCommasRepeats) {
    auto r = parse({"--prefill", "a:1", "b:2", "--decode", "c:3,d:4", "--prefill=e:5,f:6",
                    "--decode", "http://g:7/", "--port", "1"});
    ASSERT_EQ(r.action, ParseOutcome::Action::Run) << r.output;
    EXPECT_EQ(texts(r.config.prefill), (Strings{"a:1", "b:2", "e:5", "f:6"}));
    EXPECT_EQ(texts(r.config.decode), (Strings{"c:3", "d:4", "g:7"}));
    EXPECT_EQ(r.config.port, 1);
}

TEST(ConfigFlags, Ipv6AndDnsInstances) {
    auto r = parse({"--prefill", "[::1]:8100", "http://[fe80::1%eth0]:9/", "--decode",
                    "Decode-0.PD.svc.cluster.local:8200"});
    ASSERT_EQ(r.action, ParseOutcome::Action::Run) << r.output;
    ASSERT_EQ(r.config.prefill.size(), 2u);
    EXPECT_EQ(r.config.prefill[0].host, "::1");
    EXPECT_EQ(r.config.prefill[0].port, 8100);
    EXPECT_EQ(r.config.prefill[0].text(), "[::1]:8100");
    EXPECT_EQ(r.config.prefill[1].text(), "[fe80::1%eth0]:9");
    EXPECT_EQ(texts(r.config.decode), Strings{"decode-0.pd.svc.cluster.local:8200"});
}

// Numeric IPv4 hosts get one spelling (the resolver reads all of these as 127.0.0.1), so an
// engine cannot be added twice under another spelling; DNS names starting with a digit stay.
TEST(ConfigFlags, NumericIpv4HostsAreCanonical) {
    auto r = parse({"--prefill", "127.1:1", "0x7f000001:2", "2130706433:3", "0177.0.0.1:4",
                    "--decode", "10.0.0.5:5", "1password.example:6", "0.0.0.0:7"});
    ASSERT_EQ(r.action, ParseOutcome::Action::Run) << r.output;
    EXPECT_EQ(texts(r.config.prefill),
              (Strings{"127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3", "127.0.0.1:4"}));
    EXPECT_EQ(texts(r.config.decode), (Strings{"10.0.0.5:5", "1password.example:6", "0.0.0.0:7"}));
}

TEST(ConfigFlags, ToyProxyAliasesZipHostsAndPorts) {
    auto r = parse({"--prefiller-hosts", "p1", "p2", "--prefiller-ports", "8100", "8101",
                    "--decoder-host", "d1", "--decoder-port", "8200"});
    ASSERT_EQ(r.action, ParseOutcome::Action::Run) << r.output;
    EXPECT_EQ(texts(r.config.prefill), (Strings{"p1:8100", "p2:8101"}));
    EXPECT_EQ(texts(r.config.decode), Strings{"d1:8200"});
}

TEST(ConfigFlags, ToyProxyDefaultsApplyOnlyWhenOneOfThePairIsGiven) {
    auto r = parse({"--prefiller-port", "9100", "--decoder-host", "::1"});
    ASSERT_EQ(r.action, ParseOutcome::Action::Run) << r.output;
    EXPECT_EQ(texts(r.config.prefill), Strings{"localhost:9100"});
    EXPECT_EQ(texts(r.config.decode), Strings{"[::1]:8200"});
    // No alias at all: no defaults, so instances are missing.
    auto none = parse({});
    EXPECT_EQ(none.exit_code, 2);
}

TEST(ConfigFlags, AliasesCombineWithPrefillFlag) {
    auto r = parse({"--prefill", "a:1", "--prefiller-host", "b", "--decoder-ports", "7"});
    ASSERT_EQ(r.action, ParseOutcome::Action::Run) << r.output;
    EXPECT_EQ(texts(r.config.prefill), (Strings{"a:1", "b:8100"}));
    EXPECT_EQ(texts(r.config.decode), Strings{"localhost:7"});
}

TEST(ConfigFlags, DemoNeedsNoInstances) {
    auto r = parse({"--demo"});
    ASSERT_EQ(r.action, ParseOutcome::Action::Run) << r.output;
    EXPECT_TRUE(r.config.demo);
    EXPECT_TRUE(r.config.prefill.empty());
}

TEST(ConfigFlags, HelpAndVersionExitZero) {
    for (const char* flag : {"--help", "-h"}) {
        auto r = parse({flag});
        EXPECT_EQ(r.action, ParseOutcome::Action::Exit);
        EXPECT_EQ(r.exit_code, 0);
        EXPECT_EQ(r.output, help_text());
    }
    // --help wins over missing instances, and over later bad flags.
    EXPECT_EQ(parse({"--port", "1", "--help", "--bogus"}).exit_code, 0);
    auto v = parse({"--version"});
    EXPECT_EQ(v.action, ParseOutcome::Action::Exit);
    EXPECT_EQ(v.exit_code, 0);
    EXPECT_EQ(v.output, "pdrouter " + std::string(version()) + "\n");
    EXPECT_EQ(version(), PDR_TEST_PROJECT_VERSION);
}

TEST(ConfigFlags, CheckConfigValidatesEverythingAndStartsNothing) {
    auto ok = parse(with_instances({"--check-config", "--port", "9000"}));
    EXPECT_EQ(ok.action, ParseOutcome::Action::Exit);
    EXPECT_EQ(ok.exit_code, 0);
    EXPECT_EQ(ok.output, "configuration OK\n");
    // The file is read and checked as at start-up, wherever the flag stands.
    TempFile bad(".yaml", "prefill: 127.0.0.1:8100\ndecode: 127.0.0.1:8200\ncolour: red\n");
    auto r = parse({"--check-config", "--config", bad.path()});
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_NE(r.output.find("unknown key 'colour'"), std::string::npos) << r.output;
    EXPECT_EQ(parse({"--check-config", "--prefill", "127.0.0.1:8100"}).exit_code, 2);
    EXPECT_EQ(parse(with_instances({"--check-config=yes"})).exit_code, 2);
    EXPECT_EQ(parse(with_instances({"--check-config", "--help"})).output, help_text());
}

TEST(ConfigFlags, HelpMentionsEveryFlagAndEnv) {
    std::string h = help_text();
    for (const char* flag : {"--host",
                             "--port",
                             "--port-file",
                             "--prefill",
                             "--decode",
                             "--model",
                             "--admin-api-key",
                             "--upstream-api-key",
                             "--config",
                             "--check-config",
                             "--connect-timeout-ms",
                             "--prefill-timeout-ms",
                             "--decode-timeout-ms",
                             "--decode-idle-timeout-ms",
                             "--request-read-timeout-ms",
                             "--client-idle-timeout-ms",
                             "--upstream-idle-timeout-ms",
                             "--shutdown-grace-ms",
                             "--kv-lease-timeout-ms",
                             "--health-interval-ms",
                             "--health-backoff-max-ms",
                             "--max-body-bytes",
                             "--max-header-bytes",
                             "--max-concurrent-requests",
                             "--max-client-connections",
                             "--on-missing-kv-params",
                             "--prefill-retries",
                             "--decode-retries",
                             "--no-lease-refresh",
                             "--log-level",
                             "--log-format",
                             "--demo",
                             "--demo-token-delay-ms",
                             "--version",
                             "--help",
                             "--prefiller-hosts",
                             "--prefiller-host",
                             "--prefiller-ports",
                             "--prefiller-port",
                             "--decoder-hosts",
                             "--decoder-host",
                             "--decoder-ports",
                             "--decoder-port",
                             "ADMIN_API_KEY",
                             "OPENAI_API_KEY"}) {
        EXPECT_NE(h.find(std::string(flag) + " "), std::string::npos) << flag;
    }
}

TEST(ConfigAddress, ParsesAcceptedForms) {
    struct Case {
        const char* in;
        const char* host;
        unsigned short port;
    };
    for (const Case& c :
         {Case{"localhost:8100", "localhost", 8100}, Case{"http://10.0.0.1:80", "10.0.0.1", 80},
          Case{"HTTP://Host:1/", "host", 1}, Case{"[::1]:65535", "::1", 65535},
          Case{"[2001:db8::7]:9", "2001:db8::7", 9}, Case{"[0::1]:80", "::1", 80},
          Case{"[0:0:0:0:0:0:0:1]:80", "::1", 80}, Case{"[2001:DB8:0:0::7]:9", "2001:db8::7", 9},
          Case{"my_svc-1.ns:30000", "my_svc-1.ns", 30000},
          Case{"Engine.Example.:8000", "engine.example", 8000},
          Case{"1password.example:1", "1password.example", 1}, Case{"127.0.0.1.:5", "127.0.0.1", 5},
          Case{"[FE80::1%Eth0]:80", "fe80::1%Eth0", 80}}) {
        InstanceAddress a;
        std::string err;
        ASSERT_TRUE(parse_instance_address(c.in, a, err)) << c.in << ": " << err;
        EXPECT_EQ(a.host, c.host) << c.in;
        EXPECT_EQ(a.port, c.port) << c.in;
    }
}

TEST(ConfigAddress, RejectsHostNamesOverTheDnsLimits) {
    InstanceAddress a;
    std::string err;
    const std::string label63(63, 'a');
    EXPECT_TRUE(parse_instance_address(label63 + ".example:1", a, err)) << err;
    EXPECT_FALSE(parse_instance_address(label63 + "a.example:1", a, err));
    EXPECT_NE(err.find("invalid host name"), std::string::npos) << err;
    std::string long_name;
    while (long_name.size() < 250) {
        long_name += "abcdefghi.";
    }
    long_name += "example";  // 257 characters in labels of 9
    EXPECT_FALSE(parse_instance_address(long_name + ":1", a, err));
    EXPECT_FALSE(parse_instance_address("256.1.1.1:1", a, err));
    EXPECT_EQ(err, "invalid IPv4 address");
}

TEST(ConfigAddress, RejectsBadForms) {
    for (const char* in :
         {"", "localhost", "localhost:", ":80", "host:0", "host:65536", "host:12a", "::1:80",
          "[::1]", "[::1]80", "[::1:80", "[]:80", "[1::2::3]:80", "https://h:1", "http://h:1/v1",
          "ho st:1", "h/x:1", "[zz::1]:80", "-host:1",
          // numeric-looking hosts that are no IPv4 address, and names DNS cannot hold
          "256.1.1.1:80", "1.2.3.4.5:80", "10.0.0.300:80", "a.b.7:80", "a..b:80", ".a:80",
          "a.-b:80", "a-.b:80", "..:80", "x.:80:80",
          // zones are interface names
          "[fe80::1%a;b]:80", "[fe80::1%a\tb]:80", "[fe80::1%abcdefghijklmnop]:80"}) {
        InstanceAddress a;
        std::string err;
        EXPECT_FALSE(parse_instance_address(in, a, err)) << in;
        EXPECT_FALSE(err.empty()) << in;
    }
}

}  // namespace
}  // namespace pdr::config::test
