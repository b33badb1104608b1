// The push-mode settings (docs/configuration.md "Push mode"): per-prefill KV coordinates from
// flags, the vLLM push demo's single-prefill spellings and config-file keys, and the checks that
// tie them to the prefill list.
#include <gtest/gtest.h>

#include "tests/unit/config/config_test_util.hpp"

namespace pdr::config::test {
namespace {

std::vector<std::string> push(std::vector<std::string> extra) {
    std::vector<std::string> args = {"--kv-mode",      "push",           "--prefill",
                                     "127.0.0.1:8100", "127.0.0.1:8101", "--decode",
                                     "127.0.0.1:8200"};
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
}

TEST(ConfigPush, FlagsGivePerPrefillCoordinates) {
    auto r = parse(push({"--prefill-engine-ids", "p0", "p1", "--prefill-kv-hosts", "10.0.0.5",
                         "[::1]", "--prefill-side-channel-ports", "5601", "5602",
                         "--prefill-tp-size", "2", "--prefill-pp-size", "3", "--transfer-agent"}));
    ASSERT_EQ(r.action, ParseOutcome::Action::Run) << r.output;
    const Config& c = r.config;
    EXPECT_EQ(c.kv_mode, KvMode::Push);
    EXPECT_EQ(to_string(c.kv_mode), "push");
    EXPECT_TRUE(c.transfer_agent);
    const PushCoords p0 = push_coords_of(c, 0);
    const PushCoords p1 = push_coords_of(c, 1);
    EXPECT_EQ(p0.engine_id, "p0");
    EXPECT_EQ(p0.kv_host, "10.0.0.5");
    EXPECT_EQ(p0.side_channel_port, 5601);
    EXPECT_EQ(p1.engine_id, "p1");
    EXPECT_EQ(p1.kv_host, "::1");
    EXPECT_EQ(p1.side_channel_port, 5602);
    EXPECT_EQ(p1.tp_size, 2);
    EXPECT_EQ(p1.pp_size, 3);
}

TEST(ConfigPush, DefaultsAndOnePortForAll) {
    auto r = parse(push({"--prefill-engine-ids", "p0,p1"}));
    ASSERT_EQ(r.action, ParseOutcome::Action::Run) << r.output;
    const PushCoords p1 = push_coords_of(r.config, 1);
    EXPECT_EQ(p1.kv_host, "");  // the instance's own host
    EXPECT_EQ(p1.side_channel_port, kDefaultSideChannelPort);
    EXPECT_EQ(p1.tp_size, 1);
    EXPECT_EQ(p1.pp_size, 1);
    EXPECT_FALSE(r.config.transfer_agent);
    r = parse(push({"--prefill-engine-ids", "p0", "p1", "--prefill-side-channel-ports", "7000"}));
    ASSERT_EQ(r.action, ParseOutcome::Action::Run) << r.output;
    EXPECT_EQ(push_coords_of(r.config, 0).side_channel_port, 7000);
    EXPECT_EQ(push_coords_of(r.config, 1).side_channel_port, 7000);
}

TEST(ConfigPush, TheVllmDemoSpellingsForOnePrefill) {
    auto r = parse({"--kv-mode", "push", "--prefill", "127.0.0.1:8100", "--decode",
                    "127.0.0.1:8200", "--prefill-engine-id", "engine-a", "--prefill-kv-host",
                    "127.0.0.2", "--prefill-side-channel-port", "5700"});
    ASSERT_EQ(r.action, ParseOutcome::Action::Run) << r.output;
    const PushCoords p = push_coords_of(r.config, 0);
    EXPECT_EQ(p.engine_id, "engine-a");
    EXPECT_EQ(p.kv_host, "127.0.0.2");
    EXPECT_EQ(p.side_channel_port, 5700);
}

TEST(ConfigPush, ConfigFileGivesThemToo) {
    TempFile f(".yaml",
               "kv_mode: push\n"
               "prefill: [127.0.0.1:8100, 127.0.0.1:8101]\n"
               "decode: [127.0.0.1:8200]\n"
               "prefill_engine_ids: [pa, pb]\n"
               "prefill_side_channel_ports: [5601, 5602]\n"
               "prefill_tp_size: 4\n"
               "transfer_agent: true\n");
    auto r = parse({"--config", f.path()});
    ASSERT_EQ(r.action, ParseOutcome::Action::Run) << r.output;
    EXPECT_EQ(push_coords_of(r.config, 1).engine_id, "pb");
    EXPECT_EQ(push_coords_of(r.config, 1).side_channel_port, 5602);
    EXPECT_EQ(push_coords_of(r.config, 0).tp_size, 4);
    EXPECT_TRUE(r.config.transfer_agent);
}

TEST(ConfigPush, Errors) {
    expect_error(parse(push({})),
                 "pdrouter: --kv-mode push needs one --prefill-engine-ids value per prefill "
                 "instance, in --prefill order (P's --kv-transfer-config engine_id): got 0 for 2 "
                 "prefill instance(s)");
    expect_error(parse(push({"--prefill-engine-ids", "p0"})),
                 "pdrouter: --kv-mode push needs one --prefill-engine-ids value per prefill "
                 "instance, in --prefill order (P's --kv-transfer-config engine_id): got 1 for 2 "
                 "prefill instance(s)");
    expect_error(parse(push({"--prefill-engine-ids", "p0", "p0"})),
                 "pdrouter: prefill instances 127.0.0.1:8100 and 127.0.0.1:8101 have the same "
                 "engine id (--prefill-engine-ids values 1 and 2): each P needs its own");
    expect_error(parse(push({"--prefill-engine-ids", "p0", "p\x01"})),
                 "pdrouter: invalid value for --prefill-engine-ids: an engine id holds "
                 "printable ASCII characters only, no spaces");
    expect_error(parse(push({"--prefill-engine-ids", "p0", "p1", "--prefill-kv-hosts", "h1"})),
                 "pdrouter: 1 --prefill-kv-hosts value(s) for 2 prefill instance(s): give one "
                 "per prefill instance, in --prefill order");
    expect_error(
        parse(push({"--prefill-engine-ids", "p0", "p1", "--prefill-kv-hosts", "a/b", "h"})),
        "pdrouter: invalid value for --prefill-kv-hosts: expected a host name or "
        "IP address");
    expect_error(parse(push({"--prefill-engine-ids", "p0", "p1", "--prefill-side-channel-ports",
                             "1", "2", "3"})),
                 "pdrouter: 3 --prefill-side-channel-ports value(s) for 2 prefill instance(s): "
                 "give one for all, or one per prefill instance");
    expect_error(
        parse(push({"--prefill-engine-ids", "p0", "p1", "--prefill-side-channel-ports", "0"})),
        "pdrouter: invalid value for --prefill-side-channel-ports: expected a port "
        "1..65535");
    expect_error(parse(with_instances({"--prefill-engine-ids", "p0"})),
                 "pdrouter: --prefill-engine-ids, --prefill-kv-hosts and "
                 "--prefill-side-channel-ports are only used with --kv-mode push (the mode is "
                 "pull)");
    expect_error(parse(with_instances({"--kv-mode", "pushy"})),
                 "pdrouter: invalid value for --kv-mode: expected pull, push or lmcache");
}

}  // namespace
}  // namespace pdr::config::test
