// pdx::AsioPump: an EventFd-mode agent driven from an Asio io_context (transfer/asio/).
#include <gtest/gtest.h>

#include <boost/asio.hpp>
#include <functional>

#include "pdx/agent.hpp"
#include "pdx/asio_pump.hpp"
#include "tests/unit/transfer/helpers.hpp"

namespace pdx {
namespace {

namespace asio = boost::asio;
using namespace std::chrono_literals;

TEST(AsioEventFd, TransfersCompleteAndNotificationsArriveOnTheIoContext) {
    asio::io_context io;
    Config c;
    c.progress = ProgressMode::EventFd;
    auto pair = test::loopback_pair(c);  // prefill "a", decode "b"
    ASSERT_TRUE(pair.a && pair.b);
    Agent& pa = *pair.a;
    Agent& da = *pair.b;
    std::memset(pa.block(pair.la, 2).data(), 0x5a, 4096);

    AsioPump pump_p(io.get_executor(), pa), pump_d(io.get_executor(), da);
    pump_p.start();
    pump_d.start();
    Status final_status = Status::InProgress;
    std::string got_payload;
    const auto io_thread = std::this_thread::get_id();
    bool callbacks_on_io_thread = true;
    da.set_notification_handler([&](const ReceivedNotification& n) {
        callbacks_on_io_thread &= std::this_thread::get_id() == io_thread;
        got_payload = n.notification.payload;
        if (final_status != Status::InProgress) {
            io.stop();
        }
    });
    std::vector<BlockId> s = {2}, t = {9};
    TransferRequest rq;
    rq.peer = pair.a_to_b;
    rq.local_layout = pair.la;
    rq.local_ids = s;
    rq.remote_layout = pair.lb;
    rq.remote_ids = t;
    rq.transfer_id = 8;
    rq.notify = Notification{NotifyKind::Done, 8, 0, 1, Status::Ok, "kv-ready"};
    rq.on_complete = [&](const TransferResult& r) {
        callbacks_on_io_thread &= std::this_thread::get_id() == io_thread;
        final_status = r.status;
        if (!got_payload.empty()) {
            io.stop();
        }
    };
    ASSERT_TRUE(pa.write_blocks(rq));
    asio::steady_timer guard(io, 5s);
    guard.async_wait([&](boost::system::error_code) { io.stop(); });
    io.run();
    EXPECT_EQ(final_status, Status::Ok);
    EXPECT_EQ(got_payload, "kv-ready");
    EXPECT_TRUE(callbacks_on_io_thread);
    EXPECT_EQ(std::to_integer<int>(da.block(pair.lb, 9)[4095]), 0x5a);
}

std::unique_ptr<Agent> loopback_agent(const char* name, ProgressMode mode) {
    Config c;
    c.backend = BackendKind::Loopback;
    c.progress = mode;
    c.name = name;
    auto a = Agent::create(c);
    EXPECT_TRUE(a);
    return a ? std::move(*a) : nullptr;
}

TEST(AsioPump, RefusesAnAgentThatIsNotInEventFdMode) {
    asio::io_context io;
    auto a = loopback_agent("t", ProgressMode::Thread);
    ASSERT_TRUE(a);
    EXPECT_THROW(AsioPump(io.get_executor(), *a), std::invalid_argument);
}

TEST(AsioPump, NoProgressAfterStopAndAPendingWaitOutlivesThePump) {
    asio::io_context io;
    auto a = loopback_agent("s", ProgressMode::EventFd);
    ASSERT_TRUE(a);
    auto pump = std::make_unique<AsioPump>(io.get_executor(), *a);
    pump->start();
    pump->start();  // idempotent
    EXPECT_TRUE(pump->running());
    io.run_for(20ms);
    const std::uint64_t steps = pump->steps();
    EXPECT_GE(steps, 1u);
    pump->stop();
    EXPECT_FALSE(pump->running());
    // Work that would wake the fd: a stopped pump must not step again.
    auto l = a->add_layout({*a->allocate_region(1 << 12), 0, 4096, 0, 1});
    ASSERT_TRUE(l);
    io.restart();
    io.run_for(20ms);
    EXPECT_EQ(pump->steps(), steps);
    // Destroy a started pump whose wait is still queued, then the agent, then run the loop:
    // the cancelled handler must touch neither.
    pump->start();
    pump.reset();
    a.reset();
    io.restart();
    EXPECT_NO_THROW(io.run_for(20ms));
}

}  // namespace
}  // namespace pdx
