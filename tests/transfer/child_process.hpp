#pragma once
// The far-side process of the multi-process transfer tests: Child fork+execs pdx_test_peer
// (peer_main.cpp), reads its descriptor and sends it line commands over a socketpair. It can
// also stop (SIGSTOP), resume (SIGCONT) and kill the process.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "pdx/agent.hpp"
#include "tests/transfer/peer_proto.hpp"

#ifndef PDX_PEER_EXE
#error "PDX_PEER_EXE must name the pdx_test_peer executable"
#endif

namespace pdx::test {

using namespace std::chrono_literals;

struct Transport {
    const char* label;
    const char* tls;
    const char* dev;
    ErrorMode mode;
    bool one_sided;  // data moves without the target progressing (shm)
    WriteProtocol protocol = WriteProtocol::Auto;
    bool am_writes = false;  // expected: writes go as active messages (Auto: tcp only)
};

// Every multi-process suite runs over these (tcp on 127.0.0.1 three ways, and shared memory).
inline const auto kTransports = ::testing::Values(
    Transport{"tcp", "tcp", "lo", ErrorMode::Auto, false, WriteProtocol::Auto, true},
    Transport{"tcp_mode_none", "tcp", "lo", ErrorMode::None, false, WriteProtocol::Auto, true},
    Transport{"tcp_rma", "tcp", "lo", ErrorMode::Auto, false, WriteProtocol::Rma, false},
    Transport{"shm", "posix,self", "", ErrorMode::Auto, true});
inline std::string transport_name(const ::testing::TestParamInfo<Transport>& info) {
    return info.param.label;
}

constexpr std::uint32_t kBlocks = 16;
constexpr std::uint64_t kBlockBytes = 1 << 20;
// Generous limits so a loaded machine (2 cores, load 10+) cannot turn a slow process into a
// "dead" peer or a missed answer; every wait is on a condition and ends as soon as it holds.
constexpr auto kPeerTimeout = 5000ms;  // both sides; the kill test uses kFastPeerTimeout
constexpr auto kFastPeerTimeout = 1000ms;
constexpr auto kAnswer = 30s;  // child start-up / command answers
constexpr auto kHeard = 20s;   // wire-up until each side has heard the other

class Child {
public:
    Child(const Transport& t, const std::string& name, std::chrono::milliseconds dead,
          std::uint32_t split = 0) {
        int sv[2];
        if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
            return;
        }
        pid_ = ::fork();
        if (pid_ == 0) {
            int fd = ::dup(sv[1]);  // without CLOEXEC
            std::vector<std::string> args = {
                PDX_PEER_EXE,
                "--fd=" + std::to_string(fd),
                "--name=" + name,
                std::string("--tls=") + t.tls,
                std::string("--dev=") + t.dev,
                "--errmode=" + std::to_string(static_cast<int>(t.mode)),
                "--blocks=" + std::to_string(kBlocks),
                "--bytes=" + std::to_string(kBlockBytes),
                "--hb=200",
                "--dead=" + std::to_string(dead.count()),
                "--split=" + std::to_string(split)};
            std::vector<char*> argv;
            for (auto& a : args) {
                argv.push_back(a.data());
            }
            argv.push_back(nullptr);
            ::execv(PDX_PEER_EXE, argv.data());
            ::_exit(127);
        }
        ::close(sv[1]);
        ch_ = std::make_unique<LineChannel>(sv[0]);
        auto line = ch_->recv(kAnswer);
        if (line && line->rfind("DESC ", 0) == 0) {
            desc_ = from_hex(line->substr(5));
        } else {
            std::cerr << "child start failed: " << (line ? *line : "<no answer>") << "\n";
        }
    }
    ~Child() {
        if (pid_ > 0) {
            kill_now();
        }
        if (ch_) {
            ::close(ch_->fd());
        }
    }
    std::string cmd(const std::string& line, std::chrono::milliseconds t = kAnswer) {
        if (!ch_->send(line)) {
            return "<send failed>";
        }
        auto r = ch_->recv(t);
        return r ? *r : "<no answer>";
    }
    void kill_now() {
        if (pid_ <= 0) {
            return;
        }
        ::kill(pid_, SIGKILL);
        ::waitpid(pid_, nullptr, 0);
        pid_ = -1;
    }
    // SIGSTOP / SIGCONT: the process stops as a whole (its kernel still acknowledges TCP).
    void stop() { ::kill(pid_, SIGSTOP); }
    void resume() { ::kill(pid_, SIGCONT); }
    pid_t pid() const { return pid_; }
    const std::vector<std::byte>& descriptor() const { return desc_; }

private:
    pid_t pid_ = -1;
    std::unique_ptr<LineChannel> ch_;
    std::vector<std::byte> desc_;
};

// The pdx_test_peer processes running now, one line each (pid, parent, state, age, command
// line): for failure messages.
inline std::string peer_processes() {
    std::string out;
    FILE* f =
        ::popen("ps -eo pid,ppid,stat,etimes,args | grep '[p]dx_test_peer' | cut -c1-160", "r");
    if (!f) {
        return "<ps failed>";
    }
    char buf[256];
    while (std::fgets(buf, sizeof buf, f)) {
        out += buf;
    }
    ::pclose(f);
    return out;
}

// This process's resident memory now and at its peak (VmRSS, VmHWM): for failure messages.
inline std::string memory_peaks() {
    std::string out;
    FILE* f = std::fopen("/proc/self/status", "r");
    if (!f) {
        return "<no /proc/self/status>";
    }
    char buf[256];
    while (std::fgets(buf, sizeof buf, f)) {
        const std::string line(buf);
        if (line.rfind("VmRSS", 0) == 0 || line.rfind("VmHWM", 0) == 0) {
            out += line.substr(0, line.size() - 1) + " ";
        }
    }
    std::fclose(f);
    return out;
}

// Waits (bounded) until `cond` holds.
template <class F>
bool until(F cond, std::chrono::milliseconds timeout = 10s) {
    const auto end = Clock::now() + timeout;
    while (!cond()) {
        if (Clock::now() >= end) {
            return false;
        }
        std::this_thread::sleep_for(2ms);
    }
    return true;
}

// One agent in this process (Thread mode) and helpers to start children and build requests.
class TwoProcess : public ::testing::TestWithParam<Transport> {
protected:
    void SetUp() override {
        if (!ucx_available()) {
            GTEST_SKIP() << "built without UCX";
        }
        make_agent(kPeerTimeout);
    }
    void make_agent(std::chrono::milliseconds peer_timeout) {
        agent_.reset();
        peer_timeout_ = peer_timeout;
        Config c;
        c.name = "parent";
        c.transports = GetParam().tls;
        c.net_devices = GetParam().dev;
        c.error_mode = GetParam().mode;
        c.write_protocol = GetParam().protocol;
        c.heartbeat_interval = 200ms;
        c.peer_timeout = peer_timeout;
        auto a = Agent::create(c);
        ASSERT_TRUE(a) << a.message();
        agent_ = std::move(*a);
        auto r = agent_->allocate_region(kBlocks * kBlockBytes);
        ASSERT_TRUE(r) << r.message();
        region_ = *r;
        layout_ = *agent_->add_layout({*r, 0, kBlockBytes, 0, kBlocks});
    }
    // Starts a child, adds it, and has it add us; waits until each side has heard the other.
    PeerHandle start(std::unique_ptr<Child>& child, const std::string& name = "child",
                     std::uint32_t split = 0) {
        child = std::make_unique<Child>(GetParam(), name, peer_timeout_, split);
        EXPECT_FALSE(child->descriptor().empty());
        auto h = agent_->add_peer(child->descriptor());
        EXPECT_TRUE(h) << h.message();
        if (!h) {
            return kNoPeer;
        }
        EXPECT_EQ(child->cmd("PEER " + to_hex(agent_->descriptor())).rfind("OK", 0), 0u);
        auto until = Clock::now() + kHeard;
        while (agent_->peer_info(*h)->ms_since_heard < 0 && Clock::now() < until) {
            std::this_thread::sleep_for(5ms);
        }
        EXPECT_GE(agent_->peer_info(*h)->ms_since_heard, 0);
        EXPECT_EQ(agent_->peer_info(*h)->am_writes, GetParam().am_writes);
        return *h;
    }
    TransferRequest req(PeerHandle p, std::span<const BlockId> l, std::span<const BlockId> r,
                        std::uint64_t id, std::chrono::milliseconds deadline = 10s) {
        TransferRequest q;
        q.peer = p;
        q.local_layout = layout_;
        q.local_ids = l;
        q.remote_layout = 0;
        q.remote_ids = r;
        q.transfer_id = id;
        q.deadline = Clock::now() + deadline;
        return q;
    }
    void fill_local(std::uint32_t seed) {
        for (BlockId i = 0; i < kBlocks; ++i) {
            fill_block(agent_->block(layout_, i), seed, i);
        }
    }
    std::unique_ptr<Agent> agent_;
    RegionId region_ = 0;
    LayoutId layout_ = 0;
    std::chrono::milliseconds peer_timeout_ = kPeerTimeout;
};

}  // namespace pdx::test
