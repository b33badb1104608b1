// upstream::Client::open(): streamed bodies piece by piece, idle timeout, cancel().
#include "net/upstream/client.hpp"

#include "net/server/http_server.hpp"
#include "tests/unit/net/server/net_test_util.hpp"
#include "tests/unit/net/upstream/client_test_util.hpp"

#include <gtest/gtest.h>

namespace pdr::upstream {
namespace {

using namespace pdr::testing;

// Named, not a braced temporary inside `co_await` (GCC 12 destroys those twice).
Request make_req(http::verb v, std::string_view target) {
    return Request{v, target, 11};
}

class StreamClientTest : public ::testing::Test {
protected:
    void SetUp() override {
        server_ = std::make_unique<server::HttpServer>(
            ioc_.get_executor(), server::Limits{},
            [this](server::Exchange& ex) -> awaitable<void> { co_await handle(ex); });
        port_ = server_->listen("127.0.0.1", 0);
        server_->start();
    }
    // /events: three SSE events, each sent only after the client confirms the previous one
    // (so they cannot be coalesced); /stall: one event, then nothing for 5 s; /silent: nothing
    // for 5 s, then /stall's answer.
    awaitable<void> handle(server::Exchange& ex) {
        ++requests_;
        const auto target = ex.request().target();
        if (target == "/silent") {
            co_await sleep_for(Duration{5000});
        }
        http::response<http::empty_body> head{http::status::ok, 11};
        head.set(http::field::content_type, "text/event-stream");
        co_await ex.begin_stream(std::move(head));
        if (target == "/events") {
            for (int i = 0; i < 3; ++i) {
                co_await ex.write_chunk("data: " + std::to_string(i) + "\n\n");
                if (!co_await next_.wait(Duration{3000})) {
                    co_return;
                }
                next_ = Event(ioc_.get_executor());
            }
            co_await ex.end_stream();
        } else if (target == "/stall" || target == "/silent") {
            co_await ex.write_chunk("data: first\n\n");
            co_await sleep_for(Duration{5000});
            co_await ex.end_stream();
        } else {
            co_await ex.write_chunk(std::string(40000, 'z'));
            co_await ex.end_stream();
        }
    }
    void run(awaitable<void> body) { run_test(ioc_, std::move(body)); }
    // Opens /stall and reads its first event: the stream then waits 5 s for more. Null (and a
    // test failure) when that fails.
    awaitable<std::unique_ptr<ResponseStream>> open_stall(Client& client, const Timeouts& t) {
        const Endpoint ep{"127.0.0.1", port_};  // named: see make_req
        auto o = co_await client.open(ep, make_req(http::verb::get, "/stall"), t);
        if (!o.stream) {
            ADD_FAILURE() << to_string(o.failure);
            co_return nullptr;
        }
        std::string got;
        EXPECT_EQ(co_await o.stream->read_some(got), Failure::None);
        EXPECT_EQ(got, "data: first\n\n");
        co_return std::move(o.stream);
    }

    net::io_context ioc_;
    std::unique_ptr<server::HttpServer> server_;
    unsigned short port_ = 0;
    int requests_ = 0;
    Event next_{ioc_.get_executor()};
};

TEST_F(StreamClientTest, ReadsEventsAsTheyArrive) {
    run([this]() -> awaitable<void> {
        Client client(ioc_.get_executor());
        Endpoint ep{"127.0.0.1", port_};
        auto o = co_await client.open(ep, make_req(http::verb::post, "/events"), quick());
        EXPECT_EQ(o.failure, Failure::None);
        if (!o.stream) {
            co_return;
        }
        EXPECT_EQ(o.stream->status(), 200u);
        EXPECT_EQ(o.stream->head()[http::field::content_type], "text/event-stream");
        for (int i = 0; i < 3; ++i) {
            std::string got;
            EXPECT_EQ(co_await o.stream->read_some(got), Failure::None);
            EXPECT_EQ(got, "data: " + std::to_string(i) + "\n\n");
            EXPECT_FALSE(o.stream->done());
            next_.set();
        }
        std::string tail;
        EXPECT_EQ(co_await o.stream->read_some(tail), Failure::None);
        EXPECT_TRUE(tail.empty());
        EXPECT_TRUE(o.stream->done());
        EXPECT_EQ(client.idle_connections(), 1u);  // complete + keep-alive: pooled
        o.stream.reset();
        // A second stream reuses the pooled connection.
        auto o2 = co_await client.open(ep, make_req(http::verb::get, "/bulk"), quick());
        if (!o2.stream) {
            ADD_FAILURE() << to_string(o2.failure);
            co_return;
        }
        std::string all;
        EXPECT_EQ(co_await o2.stream->read_all(all), Failure::None);
        EXPECT_EQ(all, std::string(40000, 'z'));
        EXPECT_EQ(server_->active_connections(), 1u);
    }());
    EXPECT_EQ(requests_, 2);
}

// An upstream whose good chunks arrive in the same segment as a broken chunk-size line: the
// events it sent reach the caller first, then the protocol failure.
TEST_F(StreamClientTest, EventsBeforeABrokenChunkArePassedOnBeforeTheFailure) {
    Acceptor acceptor(ioc_, tcp::endpoint(net::ip::make_address("127.0.0.1"), 0));
    const unsigned short port = acceptor.local_endpoint().port();
    auto serve = [&]() -> awaitable<void> {
        auto [ec, sock] = co_await acceptor.async_accept();
        if (ec) {
            co_return;
        }
        beast::tcp_stream s(std::move(sock));
        beast::flat_buffer buf;
        http::request<http::string_body> req;
        auto [rec, rn] = co_await http::async_read(s, buf, req, use_tuple);
        (void)rn;
        if (rec) {
            co_return;
        }
        co_await write_raw(s,
                           "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                           "Transfer-Encoding: chunked\r\n\r\n"
                           "9\r\ndata: 0\n\n\r\n9\r\ndata: 1\n\n\r\nzz\r\n");
        co_await sleep_for(Duration{2000});
    };
    net::co_spawn(ioc_, serve(), net::detached);
    run([&]() -> awaitable<void> {
        Client client(ioc_.get_executor());
        const Endpoint ep{"127.0.0.1", port};
        auto o = co_await client.open(ep, make_req(http::verb::get, "/events"), quick());
        if (!o.stream) {
            ADD_FAILURE() << to_string(o.failure);
            co_return;
        }
        std::string got;
        Failure f = Failure::None;
        for (int i = 0; i < 8 && f == Failure::None && !o.stream->done(); ++i) {
            f = co_await o.stream->read_some(got);
        }
        EXPECT_EQ(got, "data: 0\n\ndata: 1\n\n");
        EXPECT_EQ(f, Failure::Protocol) << to_string(f);
        EXPECT_FALSE(o.stream->done());
        std::string more;
        EXPECT_NE(co_await o.stream->read_some(more), Failure::None);  // and stays failed
        EXPECT_TRUE(more.empty());
        EXPECT_EQ(client.idle_connections(), 0u);
    }());
    acceptor.close();
}

TEST_F(StreamClientTest, StalledStreamHitsIdleTimeout) {
    run([this]() -> awaitable<void> {
        Client client(ioc_.get_executor());
        Timeouts t = quick();
        t.idle = Duration{150};
        auto stream = co_await open_stall(client, t);
        if (!stream) {
            co_return;
        }
        std::string got;
        const auto t0 = Clock::now();
        EXPECT_EQ(co_await stream->read_some(got), Failure::IdleTimeout);
        const auto took = Clock::now() - t0;
        EXPECT_GE(took, Duration{100});
        EXPECT_LT(took, Duration{1000});
        EXPECT_EQ(client.idle_connections(), 0u);
    }());
}

// fail_stalled ends a read that has waited at least the given time, as its idle timeout would;
// not one that has waited less, nor a stream whose caller is not reading, nor another endpoint's.
TEST_F(StreamClientTest, FailStalledEndsAStalledReadAsATimeout) {
    run([this]() -> awaitable<void> {
        Client client(ioc_.get_executor());
        const Endpoint ep{"127.0.0.1", port_};
        Timeouts t = quick();
        t.idle = Duration{8000};
        auto stream = co_await open_stall(client, t);
        if (!stream) {
            co_return;
        }
        // Not reading now: nothing is waiting on the upstream.
        EXPECT_EQ(client.fail_stalled(ep, Duration{0}), 0u);
        std::size_t early = 99, other = 99, ended = 99;
        auto failer = [&]() -> awaitable<void> {
            co_await sleep_for(Duration{300});
            early = client.fail_stalled(ep, Duration{5000});
            other = client.fail_stalled(Endpoint{"127.0.0.1", 1}, Duration{100});
            ended = client.fail_stalled(ep, Duration{200});
        };
        net::co_spawn(co_await net::this_coro::executor, failer(), net::detached);
        std::string got;
        const auto t0 = Clock::now();
        EXPECT_EQ(co_await stream->read_some(got), Failure::IdleTimeout);
        const auto took = Clock::now() - t0;
        EXPECT_GE(took, Duration{250});
        EXPECT_LT(took, Duration{2000});
        EXPECT_EQ(early, 0u);
        EXPECT_EQ(other, 0u);
        EXPECT_EQ(ended, 1u);
        EXPECT_EQ(client.fail_stalled(ep, Duration{0}), 0u);
        EXPECT_EQ(client.idle_connections(), 0u);
    }());
}

// Before the answer's head, request() and open() end as their response timeout would.
TEST_F(StreamClientTest, FailStalledEndsAnExchangeWaitingForItsHead) {
    run([this]() -> awaitable<void> {
        Client client(ioc_.get_executor());
        const Endpoint ep{"127.0.0.1", port_};
        Timeouts t = quick();
        t.response = Duration{8000};
        std::size_t ended = 99;
        auto failer = [&]() -> awaitable<void> {
            co_await sleep_for(Duration{300});
            ended = client.fail_stalled(ep, Duration{200});
        };
        const auto ex = co_await net::this_coro::executor;
        net::co_spawn(ex, failer(), net::detached);
        auto t0 = Clock::now();
        auto r = co_await client.request(ep, make_req(http::verb::get, "/silent"), t);
        EXPECT_EQ(r.failure, Failure::ResponseTimeout);
        EXPECT_LT(Clock::now() - t0, Duration{2000});
        EXPECT_EQ(ended, 1u);

        ended = 99;
        net::co_spawn(ex, failer(), net::detached);
        t0 = Clock::now();
        auto o = co_await client.open(ep, make_req(http::verb::get, "/silent"), t);
        EXPECT_EQ(o.failure, Failure::ResponseTimeout);
        EXPECT_LT(Clock::now() - t0, Duration{2000});
        EXPECT_EQ(ended, 1u);
    }());
}

TEST_F(StreamClientTest, CancelEndsPendingRead) {
    run([this]() -> awaitable<void> {
        Client client(ioc_.get_executor());
        const Endpoint ep{"127.0.0.1", port_};
        auto o = co_await client.open(ep, make_req(http::verb::get, "/stall"), quick());
        if (!o.stream) {
            ADD_FAILURE() << to_string(o.failure);
            co_return;
        }
        std::string got;
        EXPECT_EQ(co_await o.stream->read_some(got), Failure::None);
        ResponseStream* stream = o.stream.get();
        auto canceller = [stream]() -> awaitable<void> {
            co_await sleep_for(Duration{50});
            stream->cancel();
        };
        net::co_spawn(co_await net::this_coro::executor, canceller(), net::detached);
        const auto t0 = Clock::now();
        EXPECT_EQ(co_await o.stream->read_some(got), Failure::Canceled);
        EXPECT_LT(Clock::now() - t0, Duration{1000});
        EXPECT_EQ(co_await o.stream->read_some(got), Failure::Canceled);
        EXPECT_EQ(client.idle_connections(), 0u);
    }());
}

TEST_F(StreamClientTest, CoroutineCancellationEndsPendingRead) {
    run([this]() -> awaitable<void> {
        Client client(ioc_.get_executor());
        const Endpoint ep{"127.0.0.1", port_};
        auto o = co_await client.open(ep, make_req(http::verb::get, "/stall"), quick());
        if (!o.stream) {
            ADD_FAILURE() << to_string(o.failure);
            co_return;
        }
        std::string got;
        EXPECT_EQ(co_await o.stream->read_some(got), Failure::None);
        using namespace net::experimental::awaitable_operators;
        Failure f = Failure::None;
        ResponseStream& stream = *o.stream;
        auto reader = [&]() -> awaitable<void> { f = co_await stream.read_some(got); };
        const auto t0 = Clock::now();
        co_await (reader() || sleep_for(Duration{50}));
        EXPECT_LT(Clock::now() - t0, Duration{1000});
        EXPECT_EQ(f, Failure::Canceled);
    }());
}

// The router's shape: a front server whose handler relays an upstream stream. When the
// front client disconnects, the server cancels the handler (its one signal for that): the
// relay's pending upstream read ends with Canceled and the upstream server sees its client go
// away, both within 100 ms. Nothing but that cancellation closes the upstream stream here.
TEST_F(StreamClientTest, FrontDisconnectCancelsUpstreamLeg) {
    Client client(ioc_.get_executor());
    Event relaying(ioc_.get_executor());
    Event relay_done(ioc_.get_executor());
    Failure relay_failure = Failure::None;
    Clock::time_point relay_end{};
    const Endpoint up{"127.0.0.1", port_};
    server::HttpServer front(
        ioc_.get_executor(), server::Limits{}, [&](server::Exchange& ex) -> awaitable<void> {
            auto o = co_await client.open(up, make_req(http::verb::get, "/stall"), quick());
            if (!o.stream) {
                co_return;
            }
            http::response<http::empty_body> head{http::status::ok, 11};
            co_await ex.begin_stream(std::move(head));
            std::string piece;
            while (!o.stream->done()) {
                piece.clear();
                Failure f = co_await o.stream->read_some(piece);
                if (f != Failure::None) {
                    relay_failure = f;
                    break;
                }
                co_await ex.write_chunk(piece);
                relaying.set();
            }
            relay_end = Clock::now();
            relay_done.set();
        });
    const unsigned short front_port = front.listen("127.0.0.1", 0);
    front.start();
    run([&]() -> awaitable<void> {
        auto s = co_await connect_raw(front_port);
        co_await write_raw(s, "GET /relay HTTP/1.1\r\nHost: a\r\n\r\n");
        EXPECT_TRUE(co_await relaying.wait(Duration{3000}));
        const auto closed_at = Clock::now();
        s.close();
        EXPECT_TRUE(co_await relay_done.wait(Duration{3000}));
        EXPECT_EQ(relay_failure, Failure::Canceled);
        EXPECT_LT(relay_end - closed_at, Duration{100});
        // The upstream server notices its client (the relay) is gone.
        for (int i = 0; i < 20 && server_->active_connections() > 0; ++i) {
            co_await sleep_for(Duration{5});
        }
        EXPECT_EQ(server_->active_connections(), 0u);
        EXPECT_LT(Clock::now() - closed_at, Duration{100});
        co_await front.drain(Duration{100});
    }());
}

}  // namespace
}  // namespace pdr::upstream
