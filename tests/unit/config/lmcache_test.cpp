// The lmcache-mode settings (docs/configuration.md "LMCache mode"): flags, config-file keys, and
// the checks that tie them to the instance lists.
#include <gtest/gtest.h>

#include "tests/unit/config/config_test_util.hpp"

namespace pdr::config::test {
namespace {

using Ports = std::vector<unsigned short>;

std::vector<std::string> lmcache(std::vector<std::string> extra) {
    std::vector<std::string> args = {
        "--kv-mode",      "lmcache",  "--kv-ready-bind", "tcp://127.0.0.1:7500", "--prefill",
        "127.0.0.1:8100", "--decode", "127.0.0.1:8200",  "127.0.0.1:8201"};
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
}

TEST(ConfigLmcache, FlagsGivePerInstanceReceivers) {
    auto r = parse(
        lmcache({"--lmcache-init-ports", "8300,8301 8400", "--lmcache-alloc-ports", "8310,8311",
                 "8410", "--lmcache-receiver-hosts", "10.0.0.2", "[::1]", "--kv-ready-expected",
                 "2", "--kv-ready-timeout-ms", "500", "--on-kv-ready-timeout", "PROCEED",
                 "--kv-ready-ttl-ms", "900", "--kv-ready-max-pending", "10"}));
    ASSERT_EQ(r.action, ParseOutcome::Action::Run) << r.output;
    const Config& c = r.config;
    EXPECT_EQ(c.kv_mode, KvMode::Lmcache);
    EXPECT_EQ(to_string(c.kv_mode), "lmcache");
    EXPECT_EQ(c.kv_ready_bind, "tcp://127.0.0.1:7500");
    ASSERT_EQ(c.lmcache_receivers.size(), 2u);
    EXPECT_EQ(c.lmcache_receivers[0].init_ports, (Ports{8300, 8301}));
    EXPECT_EQ(c.lmcache_receivers[0].alloc_ports, (Ports{8310, 8311}));
    EXPECT_EQ(c.lmcache_receivers[0].host, "10.0.0.2");
    EXPECT_EQ(c.lmcache_receivers[1].init_ports, (Ports{8400}));
    EXPECT_EQ(c.lmcache_receivers[1].alloc_ports, (Ports{8410}));
    EXPECT_EQ(c.lmcache_receivers[1].host, "::1");
    EXPECT_EQ(c.kv_ready_expected, (std::vector<int>{2}));
    EXPECT_EQ(c.kv_ready_timeout.count(), 500);
    EXPECT_EQ(c.on_kv_ready_timeout, OnKvReadyTimeout::Proceed);
    EXPECT_EQ(c.kv_ready_ttl.count(), 900);
    EXPECT_EQ(c.kv_ready_max_pending, 10u);
}

TEST(ConfigLmcache, Defaults) {
    auto r = parse(lmcache({}));
    ASSERT_EQ(r.action, ParseOutcome::Action::Run) << r.output;
    EXPECT_TRUE(r.config.lmcache_receivers.empty());  // such a D is never chosen (logged)
    EXPECT_EQ(r.config.kv_ready_timeout.count(), 10000);
    EXPECT_EQ(r.config.on_kv_ready_timeout, OnKvReadyTimeout::Error);
    EXPECT_EQ(r.config.kv_ready_ttl.count(), 60000);
    EXPECT_EQ(r.config.kv_ready_max_pending, 65536u);
}

TEST(ConfigLmcache, ConfigFileGivesThemToo) {
    TempFile f(".yaml",
               "kv_mode: lmcache\n"
               "kv_ready_bind: tcp://*:7500\n"
               "prefill: [127.0.0.1:8100]\n"
               "decode: [127.0.0.1:8200, 127.0.0.1:8201]\n"
               "lmcache_init_ports: [\"8300,8301\", \"8400,8401\"]\n"
               "lmcache_alloc_ports: [\"8310,8311\", \"8410,8411\"]\n"
               "on_kv_ready_timeout: proceed\n");
    auto r = parse({"--config", f.path()});
    ASSERT_EQ(r.action, ParseOutcome::Action::Run) << r.output;
    ASSERT_EQ(r.config.lmcache_receivers.size(), 2u);
    EXPECT_EQ(r.config.lmcache_receivers[1].alloc_ports, (Ports{8410, 8411}));
    EXPECT_EQ(r.config.kv_ready_bind, "tcp://*:7500");
    EXPECT_EQ(r.config.on_kv_ready_timeout, OnKvReadyTimeout::Proceed);
}

TEST(ConfigLmcache, Errors) {
    expect_error(parse({"--kv-mode", "lmcache", "--prefill", "a:1", "--decode", "b:2"}),
                 "pdrouter: --kv-mode lmcache needs --kv-ready-bind tcp://HOST:PORT (the ZMQ "
                 "PULL socket LMCache's pd_proxy_host/pd_proxy_port point to)");
    expect_error(parse(lmcache({"--kv-ready-bind", "udp://x:1"})),
                 "pdrouter: invalid value for --kv-ready-bind: expected "
                 "tcp://HOST:PORT (HOST may be * for all interfaces)");
    expect_error(parse(lmcache({"--kv-ready-bind", "tcp://x:70000"})),
                 "pdrouter: invalid value for --kv-ready-bind: expected "
                 "tcp://HOST:PORT (HOST may be * for all interfaces)");
    expect_error(parse(lmcache({"--lmcache-init-ports", "8300", "--lmcache-alloc-ports", "8310"})),
                 "pdrouter: 1 LMCache receiver(s) (--lmcache-init-ports/--lmcache-alloc-ports/"
                 "--lmcache-receiver-hosts) for 2 decode instance(s): give one per decode "
                 "instance, in --decode order");
    expect_error(
        parse(lmcache({"--lmcache-init-ports", "8300,8301 1", "--lmcache-alloc-ports", "8310 2"})),
        "pdrouter: decode instance 127.0.0.1:8200 has 2 LMCache init port(s) but 1 "
        "alloc port(s): give one of each per D TP rank");
    expect_error(parse(lmcache({"--lmcache-init-ports", "8300,0 1"})),
                 "pdrouter: invalid value for --lmcache-init-ports: item 2 is not a port "
                 "1..65535");
    expect_error(parse(lmcache({"--kv-ready-expected", "1", "2"})),
                 "pdrouter: 2 --kv-ready-expected value(s) for 1 prefill instance(s): give one "
                 "per prefill instance, in --prefill order");
    expect_error(parse(lmcache({"--kv-ready-expected", "65"})),
                 "pdrouter: invalid value for --kv-ready-expected: expected an integer 0..64");
    expect_error(parse(lmcache({"--on-kv-ready-timeout", "wait"})),
                 "pdrouter: invalid value for --on-kv-ready-timeout: expected one of "
                 "error, proceed");
    expect_error(parse(with_instances({"--kv-ready-bind", "tcp://*:1"})),
                 "pdrouter: --kv-ready-bind, --kv-ready-allow, --kv-ready-curve-*, --lmcache-* "
                 "and --kv-ready-expected are only used with --kv-mode lmcache (the mode is pull)");
    expect_error(parse(with_instances({"--kv-ready-allow", "10.0.0.0/8"})),
                 "pdrouter: --kv-ready-bind, --kv-ready-allow, --kv-ready-curve-*, --lmcache-* "
                 "and --kv-ready-expected are only used with --kv-mode lmcache (the mode is pull)");
    expect_error(parse(lmcache({"--kv-ready-allow", "10.0.0.0/8", "prefill-0.internal"})),
                 "pdrouter: invalid value for --kv-ready-allow: expected CIDRs or IP addresses (a "
                 "sender is known by its address only, host names cannot match)");
    expect_error(parse(lmcache({"--kv-ready-allow", "10.0.0.0/33"})),
                 "pdrouter: invalid value for --kv-ready-allow: expected a CIDR such as "
                 "10.0.0.0/8 or fd00::/8");
    expect_error(parse(lmcache({"--kv-ready-allow", std::string(100'000, '1')})),
                 "pdrouter: invalid value for --kv-ready-allow: expected a CIDR, an IP address or "
                 "a host name");
    expect_error(parse(lmcache({"--kv-ready-curve-clients-file", "/etc/keys"})),
                 "pdrouter: --kv-ready-curve-clients-file needs --kv-ready-curve-secret-key-file "
                 "(the senders' keys are checked only when CURVE is on)");
}

TEST(ConfigLmcache, SenderAllowListAndCurveFiles) {
    auto r = parse(
        lmcache({"--kv-ready-allow", "10.0.0.0/8", "::1", "--kv-ready-curve-secret-key-file",
                 "/run/secrets/kv.key", "--kv-ready-curve-clients-file", "/run/secrets/clients"}));
    ASSERT_EQ(r.action, ParseOutcome::Action::Run) << r.output;
    EXPECT_EQ(r.config.kv_ready_allow, (std::vector<std::string>{"10.0.0.0/8", "::1"}));
    EXPECT_EQ(r.config.kv_ready_curve_secret_key_file, "/run/secrets/kv.key");
    EXPECT_EQ(r.config.kv_ready_curve_clients_file, "/run/secrets/clients");
}

// Several replicas: the replica id is the host peers reach the PULL socket at.
TEST(ConfigLmcache, ReplicaIdAndPeers) {
    auto none = parse(lmcache({}));
    ASSERT_EQ(none.action, ParseOutcome::Action::Run) << none.output;
    EXPECT_EQ(none.config.replica_id, "");  // one replica: req_ids unchanged
    EXPECT_TRUE(none.config.peer_routers.empty());
    EXPECT_EQ(none.config.peer_routers_dns.port, 0);
    EXPECT_EQ(none.config.kv_ready_forward_hwm, 1000);

    auto by_bind = parse(lmcache({"--peer-routers", "[FD00::2]:7500", "10.0.0.3:7500"}));
    ASSERT_EQ(by_bind.action, ParseOutcome::Action::Run) << by_bind.output;
    EXPECT_EQ(by_bind.config.replica_id, "127.0.0.1");  // --kv-ready-bind's host
    EXPECT_EQ(texts(by_bind.config.peer_routers),
              (std::vector<std::string>{"[fd00::2]:7500", "10.0.0.3:7500"}));

    auto given = parse(
        lmcache({"--kv-ready-bind", "tcp://*:7500", "--replica-id", "[FD00::1]",
                 "--peer-routers-dns", "pdrouter-kv.ns.svc:7500", "--kv-ready-forward-hwm", "50"}));
    ASSERT_EQ(given.action, ParseOutcome::Action::Run) << given.output;
    EXPECT_EQ(given.config.replica_id, "fd00::1");
    EXPECT_EQ(given.config.peer_routers_dns, (InstanceAddress{"pdrouter-kv.ns.svc", 7500}));
    EXPECT_EQ(given.config.kv_ready_forward_hwm, 50);

    TempFile f(".yaml",
               "kv_mode: lmcache\nkv_ready_bind: tcp://0.0.0.0:7500\nreplica_id: 10.0.0.2\n"
               "peer_routers: [10.0.0.3:7500]\nprefill: [127.0.0.1:8100]\n"
               "decode: [127.0.0.1:8200]\n");
    auto file = parse({"--config", f.path()});
    ASSERT_EQ(file.action, ParseOutcome::Action::Run) << file.output;
    EXPECT_EQ(file.config.replica_id, "10.0.0.2");
    EXPECT_EQ(texts(file.config.peer_routers), (std::vector<std::string>{"10.0.0.3:7500"}));
}

TEST(ConfigLmcache, ReplicaErrors) {
    expect_error(
        parse(lmcache({"--kv-ready-bind", "tcp://*:7500", "--peer-routers", "10.0.0.3:7500"})),
        "pdrouter: --peer-routers/--peer-routers-dns need --replica-id ID: the host the "
        "other replicas reach this one's PULL socket at (e.g. the pod IP), since "
        "--kv-ready-bind tcp://*:7500 does not name one");
    expect_error(parse(lmcache({"--replica-id", "a@b"})),
                 "pdrouter: invalid value for --replica-id: expected 1 to 64 letters, "
                 "digits, '.', ':', '-' or '_'");
    expect_error(parse(with_instances({"--peer-routers", "10.0.0.3:7500"})),
                 "pdrouter: --replica-id, --peer-routers and --peer-routers-dns are only used "
                 "with --kv-mode lmcache (and not with --demo)");
    expect_error(parse(lmcache({"--peer-routers", "tcp://10.0.0.3:7500"})),
                 "pdrouter: invalid value for --peer-routers: expected "
                 "HOST:PORT");
    expect_error(parse(lmcache({"--kv-ready-forward-hwm", "0"})),
                 "pdrouter: invalid value for --kv-ready-forward-hwm: expected an integer "
                 "1..1000000");
}

}  // namespace
}  // namespace pdr::config::test
