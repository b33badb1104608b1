// Fault handling across two processes over UCX: peers stopped and resumed, killed early,
// corrupt descriptors. This process runs an agent in Thread mode; pdx_test_peer is the other.
#include <gtest/gtest.h>

#include <iostream>

#include "tests/transfer/child_process.hpp"

namespace pdx {
namespace {

using namespace std::chrono_literals;
using namespace test;  // Child, Transport, kBlocks...
using Faults = TwoProcess;

// Waits (bounded) until `cond` holds.
template <class F>
bool until(F cond, std::chrono::milliseconds timeout) {
    const auto end = Clock::now() + timeout;
    while (!cond()) {
        if (Clock::now() >= end) {
            return false;
        }
        std::this_thread::sleep_for(2ms);
    }
    return true;
}

// A peer stopped (SIGSTOP) while a write to it is in flight is declared gone after the peer
// timeout and the write ends PeerGone; when it runs again (SIGCONT) it finds itself gone too,
// and both sides can add each other again as a new connection. The survivor never crashes
// (UCX 1.13 used to call through a NULL handler in the tcp progress after such a resume).
TEST_P(Faults, StoppedPeerResumedAfterBeingDeclaredGoneNeverCrashesTheSurvivor) {
    make_agent(kFastPeerTimeout);
    std::unique_ptr<Child> child;
    PeerHandle p = start(child);
    ASSERT_NE(p, kNoPeer);
    std::string ours = "1";  // the child's handle for this agent
    std::vector<BlockId> all(kBlocks);
    for (BlockId i = 0; i < kBlocks; ++i) {
        all[i] = i;
    }
    constexpr int kRounds = 6;
    for (int round = 0; round < kRounds; ++round) {
        SCOPED_TRACE("round " + std::to_string(round));
        fill_local(100 + round);
        child->stop();
        const auto stopped = Clock::now();
        // 16 MiB to a stopped target (over tcp it has to place or acknowledge the data)
        auto w = agent_->write_blocks(req(p, all, all, 1000 + round, 30s));
        ASSERT_TRUE(w) << w.message();
        const Status s = agent_->wait(*w, 10s);
        if (GetParam().one_sided) {
            EXPECT_TRUE(s == Status::Ok || s == Status::PeerGone) << to_string(s);
        } else {
            EXPECT_EQ(s, Status::PeerGone) << agent_->result(*w)->message;
        }
        ASSERT_TRUE(until([&] { return !agent_->peer_info(p)->alive; }, 10s));
        std::cout
            << "[pdx] " << GetParam().label << ": stopped peer gone after "
            << std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - stopped).count()
            << " ms\n";
        child->resume();
        // The resumed peer runs: it answers, and it declares us gone in turn (it has not heard
        // from us for longer than its own timeout).
        std::string alive;
        ASSERT_TRUE(until(
            [&] {
                alive = child->cmd("ALIVE " + ours);
                return alive == "OK 0";
            },
            10s))
            << alive;
        // Our side keeps it gone; whatever it still sends is dropped without harm.
        EXPECT_FALSE(agent_->peer_info(p)->alive);
        EXPECT_EQ(agent_->write_blocks(req(p, all, all, 1)).status(), Status::PeerGone);
        // Added again (the same instance): a new connection under a new handle.
        auto again = agent_->add_peer(child->descriptor());
        ASSERT_TRUE(again) << again.message();
        EXPECT_NE(*again, p);
        const std::string answer = child->cmd("PEER " + test::to_hex(agent_->descriptor()));
        ASSERT_EQ(answer.rfind("OK ", 0), 0u) << answer;
        ours = answer.substr(3);
        p = *again;
        ASSERT_TRUE(until([&] { return agent_->peer_info(p)->ms_since_heard >= 0; }, 10s));
        auto ok = agent_->write_blocks(req(p, all, all, 2000 + round, 20s));
        ASSERT_TRUE(ok) << ok.message();
        ASSERT_EQ(agent_->wait(*ok, 20s), Status::Ok) << agent_->result(*ok)->message;
        EXPECT_EQ(child->cmd("VERIFY " + std::to_string(100 + round) + " 0:0 7:7 15:15"), "OK");
    }
    EXPECT_TRUE(agent_->peer_info(p)->alive);
}

INSTANTIATE_TEST_SUITE_P(Ucx, Faults, test::kTransports, test::transport_name);

}  // namespace
}  // namespace pdx
