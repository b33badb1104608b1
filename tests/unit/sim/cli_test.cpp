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

TEST(Cli, HelpReturnsOne) {
    SimConfig cfg;
    std::string pf;
    std::string lvl;
    testing::internal::CaptureStdout();
    EXPECT_EQ(parse({"--help"}, cfg, pf, lvl), 1);
    EXPECT_NE(testing::internal::GetCapturedStdout().find("--kv-lease-seconds"), std::string::npos);
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
