// The pdsim executable: its one stdout line, the port file, serving, and a clean exit on SIGTERM.
#include "tests/unit/sim/curl_util.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cstdlib>
#include <filesystem>
#include <fstream>

extern char** environ;

namespace pdr::sim {
namespace {

using namespace std::chrono_literals;
using namespace pdr::sim::test_util;

std::string pdsim_path() {
    const char* dir = std::getenv("PDR_BUILD_DIR");
    return std::string(dir ? dir : ".") + "/sim/pdsim";
}

// Reads one line from `fd` within `limit`.
std::string read_line(int fd, std::chrono::milliseconds limit) {
    std::string line;
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < deadline) {
        pollfd p{fd, POLLIN, 0};
        if (::poll(&p, 1, 50) <= 0) {
            continue;
        }
        char c = 0;
        if (::read(fd, &c, 1) != 1) {
            break;
        }
        if (c == '\n') {
            return line;
        }
        line.push_back(c);
    }
    return line;
}

// Waits for the child to exit within `limit`; returns its wait status or -1.
int wait_exit(pid_t pid, std::chrono::milliseconds limit) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < deadline) {
        int status = 0;
        if (::waitpid(pid, &status, WNOHANG) == pid) {
            return status;
        }
        std::this_thread::sleep_for(10ms);
    }
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
    return -1;
}

TEST(PdsimExe, StartsServesAndExitsOnSigterm) {
    const std::string exe = pdsim_path();
    ASSERT_TRUE(std::filesystem::exists(exe)) << exe;
    const auto port_file =
        std::filesystem::temp_directory_path() / ("pdsim_exe_port_" + std::to_string(::getpid()));
    std::filesystem::remove(port_file);

    int out[2];
    ASSERT_EQ(::pipe(out), 0);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, out[1], STDOUT_FILENO);
    posix_spawn_file_actions_addclose(&fa, out[0]);
    std::vector<std::string> args = {exe,   "--role",      "prefill",          "--port",
                                     "0",   "--port-file", port_file.string(), "--log-level",
                                     "warn"};
    std::vector<char*> argv;
    for (auto& a : args) {
        argv.push_back(a.data());
    }
    argv.push_back(nullptr);
    pid_t pid = 0;
    ASSERT_EQ(::posix_spawn(&pid, exe.c_str(), &fa, nullptr, argv.data(), environ), 0);
    posix_spawn_file_actions_destroy(&fa);
    ::close(out[1]);

    const std::string line = read_line(out[0], 10s);
    ::close(out[0]);
    const std::string prefix = "pdsim listening on 127.0.0.1:";
    ASSERT_EQ(line.rfind(prefix, 0), 0u) << "stdout line: '" << line << "'";
    const int port = std::stoi(line.substr(prefix.size()));
    ASSERT_GT(port, 0);

    ASSERT_TRUE(wait_until([&] { return std::filesystem::exists(port_file); }));
    std::ifstream in(port_file);
    int file_port = 0;
    in >> file_port;
    EXPECT_EQ(file_port, port);

    auto health = call("GET", static_cast<unsigned short>(port), "/health");
    EXPECT_EQ(health.status, 200);
    auto st = call("GET", static_cast<unsigned short>(port), "/debug/state");
    ASSERT_EQ(st.status, 200);
    auto state = nlohmann::json::parse(st.body);
    EXPECT_EQ(state["role"], "prefill");
    EXPECT_EQ(state["engine_id"], "pdsim-prefill-" + std::to_string(port));

    ASSERT_EQ(::kill(pid, SIGTERM), 0);
    const int status = wait_exit(pid, 10s);
    ASSERT_NE(status, -1) << "pdsim did not exit after SIGTERM";
    EXPECT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 0);
    std::filesystem::remove(port_file);
}

TEST(PdsimExe, BadFlagExitsTwo) {
    const std::string exe = pdsim_path();
    std::vector<std::string> args = {exe, "--port", "99999"};
    std::vector<char*> argv;
    for (auto& a : args) {
        argv.push_back(a.data());
    }
    argv.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
    pid_t pid = 0;
    ASSERT_EQ(::posix_spawn(&pid, exe.c_str(), &fa, nullptr, argv.data(), environ), 0);
    posix_spawn_file_actions_destroy(&fa);
    const int status = wait_exit(pid, 10s);
    ASSERT_NE(status, -1);
    EXPECT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 2);
}

}  // namespace
}  // namespace pdr::sim
