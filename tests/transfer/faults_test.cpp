// Fault handling across two processes over UCX: peers stopped and resumed, killed early,
// corrupt descriptors. This process runs an agent in Thread mode; pdx_test_peer is the other.
#include <gtest/gtest.h>

#include <algorithm>
#include <iostream>
#include <mutex>
#include <optional>

#include "tests/transfer/child_process.hpp"

namespace pdx {
namespace {

using namespace std::chrono_literals;
using namespace test;  // Child, Transport, kBlocks...
using Faults = TwoProcess;

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

// The one-sided case: the peer is stopped past our peer timeout, we declare it gone and close
// our side, and it resumes still taking us for alive (it reads our heartbeats queued while it
// was stopped before its own timeout check). When we add it again, its old connection to us is
// stale (over tcp what it sends there no longer reaches us: the soak's push mode, where every
// write of a resumed prefill to its decode hung until cancelled). Our new connection tells it
// so, and it connects again: its next write to us, under its new handle, lands with its note.
TEST_P(Faults, APeerResumedStillTakingUsForAliveConnectsAgainWhenWeAddItAgain) {
    make_agent(kFastPeerTimeout);
    std::unique_ptr<Child> child;
    PeerHandle p = start(child);
    ASSERT_NE(p, kNoPeer);
    std::string ours = child->cmd("PEER " + to_hex(agent_->descriptor()));  // its handle of us
    ASSERT_EQ(ours.rfind("OK ", 0), 0u) << ours;
    ours = ours.substr(3);
    for (int round = 0; round < 3; ++round) {
        SCOPED_TRACE("round " + std::to_string(round));
        child->stop();
        ASSERT_TRUE(until([&] { return !agent_->peer_info(p)->alive; }, 10s));
        child->resume();
        auto again = agent_->add_peer(child->descriptor());  // the same instance: a new handle
        ASSERT_TRUE(again) << again.message();
        ASSERT_NE(*again, p);
        p = *again;
        // It connects again when our new connection's first heartbeat reaches it: its handle
        // of us changes (add_peer with our descriptor answers the live one).
        std::string answer;
        EXPECT_TRUE(until(
            [&] {
                answer = child->cmd("PEER " + to_hex(agent_->descriptor()));
                return answer.rfind("OK ", 0) == 0 && answer != "OK " + ours;
            },
            10s))
            << "it never connected again: " << answer;
        ours = answer.substr(3);
        ASSERT_TRUE(until([&] { return agent_->peer_info(p)->ms_since_heard >= 0; }, 10s));
        ASSERT_EQ(child->cmd("FILL " + std::to_string(200 + round)), "OK");
        const std::uint64_t xfer = 3000 + round;
        const std::string w =
            child->cmd("WRITE " + ours + " " + std::to_string(xfer) + " 8000 1:2 5:6", 20s);
        EXPECT_EQ(w, "OK ok") << "the resumed peer's write to us (its handle " << ours << ")";
        const auto until_note = Clock::now() + 10s;
        bool noted = false;
        while (!noted && Clock::now() < until_note) {
            for (const auto& n : agent_->drain_notifications()) {
                noted = noted || (n.notification.transfer_id == xfer && n.peer == p);
            }
            std::this_thread::sleep_for(2ms);
        }
        EXPECT_TRUE(noted) << "its Done note, from its new connection";
        EXPECT_EQ(check_block(agent_->block(layout_, 2), 200 + round, 1), -1);
        EXPECT_EQ(check_block(agent_->block(layout_, 6), 200 + round, 5), -1);
        if (HasFailure()) {
            break;
        }
    }
}

// Collects the agent's peer events (they come on its progress thread).
class PeerEvents {
public:
    explicit PeerEvents(Agent& a) {
        a.set_peer_handler([this](const PeerEvent& e) {
            std::lock_guard lk(mu_);
            events_.push_back(e);
        });
    }
    std::optional<PeerEvent> find(PeerHandle p) {
        std::lock_guard lk(mu_);
        for (const auto& e : events_) {
            if (e.peer == p) {
                return e;
            }
        }
        return std::nullopt;
    }
    std::size_t count(PeerHandle p) {
        std::lock_guard lk(mu_);
        return std::count_if(events_.begin(), events_.end(),
                             [&](const PeerEvent& e) { return e.peer == p; });
    }

private:
    std::mutex mu_;
    std::vector<PeerEvent> events_;
};

// A peer that dies is detected whichever side added the other first, even before it was
// ever heard from, and a write to it never ends Ok (over shared memory a put into the dead
// process's segment completes all the same): same-host peers are watched through a pidfd.
TEST_P(Faults, PeerKilledEarlyIsDetectedWhateverTheAddOrderAndWritesNeverEndOk) {
    make_agent(test::kPeerTimeout);  // 5 s: the process watch must see it long before that
    PeerEvents events(*agent_);
    std::vector<BlockId> one = {3};
    for (int order = 0; order < 3; ++order) {
        SCOPED_TRACE(order == 0   ? "only this side added the peer"
                     : order == 1 ? "the peer added this side first"
                                  : "both added and heard");
        auto child = std::make_unique<Child>(GetParam(), "early-" + std::to_string(order),
                                             test::kPeerTimeout);
        ASSERT_FALSE(child->descriptor().empty());
        if (order == 1) {
            const std::string a = child->cmd("PEER " + to_hex(agent_->descriptor()));
            ASSERT_EQ(a.rfind("OK", 0), 0u) << a;
        }
        auto h = agent_->add_peer(child->descriptor());
        ASSERT_TRUE(h) << h.message();
        if (order == 2) {
            const std::string a = child->cmd("PEER " + to_hex(agent_->descriptor()));
            ASSERT_EQ(a.rfind("OK", 0), 0u) << a;
            ASSERT_TRUE(until([&] { return agent_->peer_info(*h)->ms_since_heard >= 0; }, 20s));
        }
        if (order == 1) {
            // The child connected to this worker first. Its death inside UCX's wire-up with
            // this worker (this side's answer still queued) can abort this process in UCX
            // 1.13.1 (docs/transfer.md, "Known UCX 1.13.1 faults"), which this test is not
            // about: the handshake settles first (heard from the child, and a note from this
            // side reached it).
            ASSERT_TRUE(until([&] { return agent_->peer_info(*h)->ms_since_heard >= 0; }, 20s));
            ASSERT_TRUE(agent_->notify(
                *h, Notification{NotifyKind::Done, 61, 0, 1, Status::Ok, "settled"}));
            ASSERT_EQ(child->cmd("WAITNOTE 1 61 10000"), "OK settled");
        }
        EXPECT_TRUE(agent_->peer_info(*h)->process_watched);
        child->kill_now();
        const auto killed = Clock::now();
        // Posted right after the death: refused, or ended, but never Ok.
        auto w = agent_->write_blocks(req(*h, one, one, 50 + order, 10s));
        if (w) {
            const Status s = agent_->wait(*w, 10s);
            EXPECT_EQ(s, Status::PeerGone) << agent_->result(*w)->message;
        } else {
            EXPECT_EQ(w.status(), Status::PeerGone) << w.message();
        }
        ASSERT_TRUE(until([&] { return events.find(*h).has_value(); }, 10s));
        const auto took = Clock::now() - killed;
        EXPECT_LT(took, 2s) << "the process watch should see the death at once";
        auto e = events.find(*h);
        // UCX may report the broken connection first: over tcp, and over shared memory too,
        // whose agents send their messages over tcp (ucx_backend.cpp)
        EXPECT_TRUE(e->reason == PeerGoneReason::Exited ||
                    e->reason == PeerGoneReason::ConnectionError)
            << "reason " << static_cast<int>(e->reason) << ": " << e->message;
        EXPECT_EQ(events.count(*h), 1u);
        EXPECT_FALSE(agent_->peer_info(*h)->alive);
        EXPECT_EQ(agent_->write_blocks(req(*h, one, one, 9)).status(), Status::PeerGone);
        // Its descriptor again (a late copy): its process has ended, so it is refused.
        EXPECT_EQ(agent_->add_peer(child->descriptor()).status(), Status::PeerGone);
        std::cout << "[pdx] " << GetParam().label << " order " << order << ": gone after "
                  << std::chrono::duration_cast<std::chrono::milliseconds>(took).count() << " ms\n";
    }
}

// A peer in another pid namespace (or host) cannot be watched: then liveness is the
// heartbeat timeout, which starts at add_peer, so a peer that never adds this side back (it
// died first, or never came up) is declared gone after peer_timeout all the same.
TEST_P(Faults, PeerNeverHeardFromIsDeclaredGoneAfterThePeerTimeout) {
    make_agent(kFastPeerTimeout);
    PeerEvents events(*agent_);
    auto child = std::make_unique<Child>(GetParam(), "silent", kFastPeerTimeout);
    ASSERT_FALSE(child->descriptor().empty());
    child->stop();  // alive, so only the timeout can tell
    auto h = agent_->add_peer(child->descriptor());
    ASSERT_TRUE(h) << h.message();
    const auto added = Clock::now();
    ASSERT_TRUE(until([&] { return events.find(*h).has_value(); }, 10s));
    const auto took = Clock::now() - added;
    EXPECT_GE(took, kFastPeerTimeout - 50ms);
    EXPECT_LT(took, kFastPeerTimeout + 2s);
    EXPECT_EQ(events.find(*h)->reason, PeerGoneReason::Timeout) << events.find(*h)->message;
    child->resume();
}

// A corrupt copy of a real descriptor (every truncation, every byte flipped) is refused before
// anything reaches UCX; the intact one then moves bytes to exactly the blocks named.
TEST_P(Faults, CorruptDescriptorsAreRefusedAndNothingLandsOutOfPlace) {
    std::unique_ptr<Child> child = std::make_unique<Child>(GetParam(), "blob", kPeerTimeout);
    const auto& blob = child->descriptor();
    ASSERT_FALSE(blob.empty());
    for (std::size_t n = 0; n < blob.size(); ++n) {
        auto h = agent_->add_peer(std::span(blob).first(n));
        ASSERT_EQ(h.status(), Status::Invalid) << "prefix " << n;
        EXPECT_NE(h.message().find("truncated"), std::string::npos) << h.message();
    }
    for (std::size_t i = 0; i < blob.size(); ++i) {
        auto bad = blob;
        bad[i] ^= std::byte{0x5a};
        auto h = agent_->add_peer(bad);
        ASSERT_EQ(h.status(), Status::Invalid) << "byte " << i;
    }
    EXPECT_TRUE(agent_->peers().empty());
    EXPECT_EQ(agent_->stats().peers, 0u);
    ASSERT_EQ(child->cmd("FILL 5"), "OK");
    auto h = agent_->add_peer(blob);
    ASSERT_TRUE(h) << h.message();
    ASSERT_EQ(child->cmd("PEER " + to_hex(agent_->descriptor())).rfind("OK", 0), 0u);
    fill_local(6);
    std::vector<BlockId> src = {2}, dst = {9};
    auto w = agent_->write_blocks(req(*h, src, dst, 1));
    ASSERT_TRUE(w) << w.message();
    ASSERT_EQ(agent_->wait(*w, 10s), Status::Ok);
    EXPECT_EQ(child->cmd("VERIFY 6 9:2"), "OK");
    std::string untouched = "VERIFY 5";
    for (BlockId b = 0; b < kBlocks; ++b) {
        if (b != 9) {
            untouched += " " + std::to_string(b) + ":" + std::to_string(b);
        }
    }
    EXPECT_EQ(child->cmd(untouched), "OK");
}

// A transfer that expired while its operations still run keeps its region pinned, and says
// so: stats count it as settling (not in flight), release_region's Busy explains it, and the
// region is released once the operations settle.
TEST_P(Faults, ExpiredTransferStillSettlingExplainsTheBusyRegion) {
    if (GetParam().one_sided) {
        GTEST_SKIP() << "shared-memory puts complete without the target";
    }
    std::unique_ptr<Child> child;
    PeerHandle p = start(child);
    auto scratch = agent_->allocate_region(kBlocks * kBlockBytes);
    ASSERT_TRUE(scratch) << scratch.message();
    auto sl = agent_->add_layout({*scratch, 0, kBlockBytes, 0, kBlocks});
    ASSERT_TRUE(sl);
    ASSERT_EQ(child->cmd("FREEZE 1500"), "OK");
    std::vector<BlockId> ids = {1, 2, 3, 4};
    TransferRequest r = req(p, ids, ids, 31, 100ms);
    r.local_layout = *sl;
    auto h = agent_->read_blocks(r);
    ASSERT_TRUE(h) << h.message();
    ASSERT_EQ(agent_->wait(*h, 5s), Status::Expired);
    const Stats s = agent_->stats();
    EXPECT_EQ(s.transfers_in_flight, 0u);
    if (s.transfers_settling == 1) {  // else the freeze already ended (a loaded machine)
        auto busy = agent_->release_region(*scratch);
        EXPECT_EQ(busy.status(), Status::Busy);
        EXPECT_NE(busy.message().find("already ended"), std::string::npos) << busy.message();
        EXPECT_EQ(agent_->region_info(*scratch)->transfers_in_flight, 1u);
        EXPECT_EQ(agent_->region_info(*scratch)->transfers_settling, 1u);
    }
    ASSERT_TRUE(until([&] { return agent_->release_region(*scratch).ok(); }, 10s));
    EXPECT_EQ(agent_->stats().transfers_settling, 0u);
}

// Caller memory cannot take shared-memory RMA: the region says so, the stats count it.
TEST_P(Faults, RegisteredMemoryReportsThatSharedMemoryCannotReachIt) {
    std::vector<std::byte> mine(1 << 20);
    auto r = agent_->register_region(mine.data(), mine.size());
    ASSERT_TRUE(r) << r.message();
    auto info = agent_->region_info(*r);
    ASSERT_TRUE(info) << info.message();
    EXPECT_FALSE(info->allocated);
    const bool shm = std::string(GetParam().tls).find("posix") != std::string::npos;
    EXPECT_EQ(info->shm_rma, !shm);
    EXPECT_EQ(agent_->stats().regions_without_shm, shm ? 1u : 0u);
    EXPECT_TRUE(agent_->region_info(0)->shm_rma);  // allocate_region
    EXPECT_EQ(agent_->register_region(mine.data(), mine.size(), MemoryKind::Cuda).status(),
              Status::Unsupported);
    ASSERT_TRUE(agent_->release_region(*r));
}

INSTANTIATE_TEST_SUITE_P(Ucx, Faults, test::kTransports, test::transport_name);

}  // namespace
}  // namespace pdx
