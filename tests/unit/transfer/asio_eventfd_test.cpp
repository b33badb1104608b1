// EventFd progress mode driven from an Asio loop: wait on event_fd() with a stream_descriptor,
// call progress(), re-arm. This is how the router and pdsim host an agent on their io_context.
#include <gtest/gtest.h>

#include <boost/asio.hpp>
#include <functional>

#include "pdx/agent.hpp"

namespace pdx {
namespace {

namespace asio = boost::asio;
using namespace std::chrono_literals;

// Keeps an async wait on the agent's fd; on readiness runs progress() and waits again.
class AsioPump {
public:
    AsioPump(asio::io_context& io, Agent& agent)
        : agent_(agent), fd_(io, ::dup(agent.event_fd())) {}
    void start() { step(); }
    void stop() { fd_.cancel(); }

private:
    void step() {
        agent_.progress();
        while (!agent_.arm())
            agent_.progress();
        fd_.async_wait(asio::posix::stream_descriptor::wait_read,
                       [this](boost::system::error_code ec) {
                           if (!ec)
                               step();
                       });
    }
    Agent& agent_;
    asio::posix::stream_descriptor fd_;
};

TEST(AsioEventFd, TransfersCompleteAndNotificationsArriveOnTheIoContext) {
    asio::io_context io;
    Config c;
    c.backend = BackendKind::Loopback;
    c.progress = ProgressMode::EventFd;
    c.name = "p";
    auto p = Agent::create(c);
    c.name = "d";
    auto d = Agent::create(c);
    ASSERT_TRUE(p && d);
    Agent& pa = **p;
    Agent& da = **d;
    auto pl = pa.add_layout({*pa.allocate_region(1 << 16), 0, 4096, 0, 16});
    auto dl = da.add_layout({*da.allocate_region(1 << 16), 0, 4096, 0, 16});
    ASSERT_TRUE(pl && dl);
    auto to_d = pa.add_peer(da.descriptor());
    ASSERT_TRUE(to_d && da.add_peer(pa.descriptor()));
    std::memset(pa.block(*pl, 2).data(), 0x5a, 4096);

    AsioPump pump_p(io, pa), pump_d(io, da);
    pump_p.start();
    pump_d.start();
    Status final_status = Status::InProgress;
    std::string got_payload;
    const auto io_thread = std::this_thread::get_id();
    bool callbacks_on_io_thread = true;
    da.set_notification_handler([&](const ReceivedNotification& n) {
        callbacks_on_io_thread &= std::this_thread::get_id() == io_thread;
        got_payload = n.notification.payload;
        if (final_status != Status::InProgress)
            io.stop();
    });
    std::vector<BlockId> s = {2}, t = {9};
    TransferRequest rq;
    rq.peer = *to_d;
    rq.local_layout = *pl;
    rq.local_ids = s;
    rq.remote_layout = *dl;
    rq.remote_ids = t;
    rq.transfer_id = 8;
    rq.notify = Notification{NotifyKind::Done, 8, 0, 1, Status::Ok, "kv-ready"};
    rq.on_complete = [&](const TransferResult& r) {
        callbacks_on_io_thread &= std::this_thread::get_id() == io_thread;
        final_status = r.status;
        if (!got_payload.empty())
            io.stop();
    };
    ASSERT_TRUE(pa.write_blocks(rq));
    asio::steady_timer guard(io, 5s);
    guard.async_wait([&](boost::system::error_code) { io.stop(); });
    io.run();
    EXPECT_EQ(final_status, Status::Ok);
    EXPECT_EQ(got_payload, "kv-ready");
    EXPECT_TRUE(callbacks_on_io_thread);
    EXPECT_EQ(std::to_integer<int>(da.block(*dl, 9)[4095]), 0x5a);
}

}  // namespace
}  // namespace pdx
