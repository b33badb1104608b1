#include "sim/sim_server.hpp"

#include <gtest/gtest.h>

#include <unistd.h>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <vector>

namespace pdr::sim {
namespace {

struct Args {
    explicit Args(std::vector<std::string> a) : store(std::move(a)) {
        ptrs.push_back(const_cast<char*>("pdsim"));
        for (auto& s : store) {
            ptrs.push_back(s.data());
        }
    }
    int argc() { return static_cast<int>(ptrs.size()); }
    char** argv() { return ptrs.data(); }
    std::vector<std::string> store;
    std::vector<char*> ptrs;
};

int parse(std::vector<std::string> a, SimConfig& cfg, std::string& port_file, std::string& level) {
    Args args(std::move(a));
    return parse_args(args.argc(), args.argv(), cfg, port_file, level);
}

TEST(Cli, AllFlags) {
    SimConfig cfg;
    std::string pf;
    std::string lvl;
    ASSERT_EQ(parse({"--role",
                     "prefill",
                     "--port",
                     "8100",
                     "--host",
                     "::1",
                     "--engine-id",
                     "eng",
                     "--model",
                     "m",
                     "--kv-lease-seconds",
                     "2.5",
                     "--token-delay-ms",
                     "7",
                     "--prefill-delay-ms",
                     "25",
                     "--decode-setup-delay-ms",
                     "30",
                     "--block-size-tokens=32",
                     "--port-file",
                     "/tmp/x",
                     "--log-level",
                     "debug",
                     "--keep-alive-ms",
                     "250"},
                    cfg, pf, lvl),
              0);
    EXPECT_EQ(cfg.role, Role::Prefill);
    EXPECT_EQ(cfg.port, 8100);
    EXPECT_EQ(cfg.host, "::1");
    EXPECT_EQ(cfg.engine_id, "eng");
    EXPECT_EQ(cfg.model, "m");
    EXPECT_DOUBLE_EQ(cfg.kv_lease_seconds, 2.5);
    EXPECT_EQ(cfg.token_delay, Duration{7});
    EXPECT_EQ(cfg.prefill_delay, Duration{25});
    EXPECT_EQ(cfg.decode_setup_delay, Duration{30});
    EXPECT_EQ(cfg.block_size_tokens, 32);
    EXPECT_EQ(cfg.keep_alive, Duration{250});
    EXPECT_EQ(pf, "/tmp/x");
    EXPECT_EQ(lvl, "debug");
}

TEST(Cli, Defaults) {
    SimConfig cfg;
    std::string pf;
    std::string lvl;
    ASSERT_EQ(parse({}, cfg, pf, lvl), 0);
    EXPECT_EQ(cfg.role, Role::Decode);
    EXPECT_EQ(cfg.port, 0);
    EXPECT_EQ(cfg.host, "127.0.0.1");
    EXPECT_EQ(cfg.model, "pdsim-model");
    EXPECT_EQ(cfg.keep_alive, Duration{5000});
    EXPECT_EQ(cfg.prefill_delay, Duration{0});
}

TEST(Cli, BadValuesReturnTwo) {
    const std::vector<std::vector<std::string>> bad = {
        {"--role", "middle"},
        {"--port", "70000"},
        {"--port", "12x"},
        {"--port"},
        {"--kv-lease-seconds", "0"},
        {"--kv-lease-seconds", "abc"},
        {"--token-delay-ms", "-1"},
        {"--prefill-delay-ms", "-1"},
        {"--prefill-delay-ms", "60001"},
        {"--decode-setup-delay-ms", "-5"},
        {"--block-size-tokens", "0"},
        {"--keep-alive-ms", "0"},
        {"--keep-alive-ms", "5s"},
        {"--log-level", "loud"},
        {"--frobnicate"},
        {"positional"},
        {"--model", ""},
    };
    for (const auto& a : bad) {
        SimConfig cfg;
        std::string pf;
        std::string lvl;
        testing::internal::CaptureStderr();
        EXPECT_EQ(parse(a, cfg, pf, lvl), 2) << a[0];
        const std::string err = testing::internal::GetCapturedStderr();
        EXPECT_NE(err.find(a[0]), std::string::npos) << err;
    }
}

TEST(Cli, LmcacheFlags) {
    SimConfig cfg;
    std::string pf;
    std::string lvl;
    ASSERT_EQ(parse({"--role", "decode", "--kv-mode", "lmcache", "--lmcache-init-ports", "8300,0",
                     "--lmcache-alloc-ports=8310,8311", "--lmcache-ports-file", "/tmp/p",
                     "--lmcache-kv-ttl-seconds", "2.5", "--lmcache-max-kv-bytes", "1000",
                     "--kv-bytes-per-token", "128"},
                    cfg, pf, lvl),
              0);
    EXPECT_EQ(cfg.kv_mode, KvMode::Lmcache);
    EXPECT_EQ(cfg.lmcache.init_ports, (std::vector<unsigned short>{8300, 0}));
    EXPECT_EQ(cfg.lmcache.alloc_ports, (std::vector<unsigned short>{8310, 8311}));
    EXPECT_EQ(cfg.lmcache.tp_size, 2);  // one rank per port
    EXPECT_EQ(cfg.lmcache.ports_file, "/tmp/p");
    EXPECT_DOUBLE_EQ(cfg.lmcache.kv_ttl_seconds, 2.5);
    EXPECT_EQ(cfg.lmcache.max_kv_bytes, 1000u);
    EXPECT_EQ(cfg.lmcache.kv_bytes_per_token, 128u);

    SimConfig d;  // a decode without ports: --tp-size free ones
    ASSERT_EQ(parse({"--kv-mode", "lmcache", "--tp-size", "3"}, d, pf, lvl), 0);
    EXPECT_EQ(d.lmcache.init_ports, (std::vector<unsigned short>{0, 0, 0}));
    EXPECT_EQ(d.lmcache.alloc_ports.size(), 3u);

    SimConfig p;
    ASSERT_EQ(parse({"--role", "prefill", "--kv-mode", "lmcache", "--tp-size", "2",
                     "--kv-ready-connect", "tcp://127.0.0.1:7500"},
                    p, pf, lvl),
              0);
    EXPECT_EQ(p.lmcache.tp_size, 2);
    EXPECT_EQ(p.lmcache.kv_ready_connect, "tcp://127.0.0.1:7500");
    EXPECT_TRUE(p.lmcache.init_ports.empty());

    SimConfig pull;  // pull mode stays the default
    ASSERT_EQ(parse({}, pull, pf, lvl), 0);
    EXPECT_EQ(pull.kv_mode, KvMode::Pull);
}

TEST(Cli, KvTransferFlags) {
    SimConfig c;
    std::string pf, lvl;
    ASSERT_EQ(parse({"--kv-mode", "push", "--kv-transfer", "pdx", "--kv-block-bytes", "262144",
                     "--kv-blocks", "300", "--kv-transports", "posix,self", "--kv-net-devices",
                     "lo", "--kv-wait-timeout-ms", "1500"},
                    c, pf, lvl),
              0);
    EXPECT_EQ(c.kv_mode, KvMode::Push);
    EXPECT_EQ(c.kv_transfer, KvTransfer::Pdx);
    EXPECT_EQ(c.block_bytes, 262144u);
    EXPECT_EQ(c.kv_blocks, 300u);
    EXPECT_EQ(c.kv_transports, "posix,self");
    EXPECT_EQ(c.kv_net_devices, "lo");
    EXPECT_EQ(c.kv_wait_timeout, Duration{1500});
    SimConfig d;
    ASSERT_EQ(parse({}, d, pf, lvl), 0);
    EXPECT_EQ(d.kv_transfer, KvTransfer::Pdx);  // this build has UCX
    for (const auto& bad : std::vector<std::vector<std::string>>{
             {"--kv-transfer", "rdma"},
             {"--kv-block-bytes", "4"},
             {"--kv-blocks", "0"},
             {"--kv-transports", ""},
             {"--kv-wait-timeout-ms", "0"},
             {"--kv-mode", "push", "--kv-transfer", "http"},
             {"--kv-block-bytes", "67108864", "--kv-blocks", "2048"}}) {
        SimConfig x;
        EXPECT_EQ(parse(bad, x, pf, lvl), 2) << bad[0];
    }
}

TEST(Cli, LmcacheBadValues) {
    const std::vector<std::vector<std::string>> bad = {
        {"--kv-mode", "pushed"},
        {"--tp-size", "0"},
        {"--kv-ready-connect", "127.0.0.1:7500"},
        {"--kv-bytes-per-token", "0"},
        {"--lmcache-init-ports", "8300,x"},
        {"--lmcache-alloc-ports", "70000"},
        {"--lmcache-alloc-ports", ""},
        {"--lmcache-kv-ttl-seconds", "0"},
        {"--lmcache-max-kv-bytes", "0"},
    };
    for (const auto& a : bad) {
        SimConfig cfg;
        std::string pf;
        std::string lvl;
        testing::internal::CaptureStderr();
        EXPECT_EQ(parse(a, cfg, pf, lvl), 2) << a[0] << " " << a[1];
        const std::string err = testing::internal::GetCapturedStderr();
        EXPECT_NE(err.find(a[0]), std::string::npos) << err;
    }
    // Receiver ports that do not pair up, or disagree with --tp-size.
    for (const auto& a : std::vector<std::vector<std::string>>{
             {"--kv-mode", "lmcache", "--lmcache-init-ports", "1,2"},
             {"--kv-mode", "lmcache", "--lmcache-init-ports", "1,2", "--lmcache-alloc-ports", "3"},
             {"--kv-mode", "lmcache", "--tp-size", "3", "--lmcache-init-ports", "1,2",
              "--lmcache-alloc-ports", "3,4"}}) {
        SimConfig cfg;
        std::string pf;
        std::string lvl;
        testing::internal::CaptureStderr();
        EXPECT_EQ(parse(a, cfg, pf, lvl), 2) << a.size();
        EXPECT_NE(testing::internal::GetCapturedStderr().find("port"), std::string::npos);
    }
}

TEST(Cli, HelpReturnsOne) {
    SimConfig cfg;
    std::string pf;
    std::string lvl;
    testing::internal::CaptureStdout();
    EXPECT_EQ(parse({"--help"}, cfg, pf, lvl), 1);
    const std::string help = testing::internal::GetCapturedStdout();
    for (const char* flag :
         {"--kv-lease-seconds", "--kv-mode", "--tp-size", "--kv-ready-connect",
          "--kv-bytes-per-token", "--lmcache-init-ports", "--lmcache-alloc-ports",
          "--lmcache-ports-file", "--lmcache-kv-ttl-seconds", "--lmcache-max-kv-bytes"}) {
        EXPECT_NE(help.find(flag), std::string::npos) << flag;
    }
}

TEST(Cli, PortFileIsWritten) {
    const auto path =
        std::filesystem::temp_directory_path() / ("pdsim_port_" + std::to_string(::getpid()));
    write_port_file(path.string(), 4321);
    std::ifstream in(path);
    int port = 0;
    in >> port;
    EXPECT_EQ(port, 4321);
    EXPECT_FALSE(std::filesystem::exists(path.string() + ".tmp"));
    std::filesystem::remove(path);
    EXPECT_THROW(write_port_file("/nonexistent-dir/x/port", 1), std::runtime_error);
}

}  // namespace
}  // namespace pdr::sim
