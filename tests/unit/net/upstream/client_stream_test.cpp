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

// A body read piece by piece (read_some) until it ends or fails, in at most 20 reads.
struct ReadBack {
    std::unique_ptr<ResponseStream> stream;  // null when open() failed (a test failure)
    std::string body;
    Failure failure = Failure::None;  // of open(), or of the read that ended it
};

awaitable<ReadBack> open_and_read(Client& client, unsigned short port, std::string_view target,
                                  const Timeouts& t) {
    const Endpoint ep{"127.0.0.1", port};
    Request req = make_req(http::verb::get, target);
    auto o = co_await client.open(ep, std::move(req), t);
    ReadBack r;
    r.failure = o.failure;
    r.stream = std::move(o.stream);
    if (!r.stream) {
        ADD_FAILURE() << to_string(r.failure);
        co_return r;
    }
    for (int i = 0; i < 20 && r.failure == Failure::None && !r.stream->done(); ++i) {
        r.failure = co_await r.stream->read_some(r.body);
    }
    co_return r;
}

// A raw upstream on one connection: each request read gets the next of `answers`, written as
// it is; after the last, or when `close_after` is set for an answer, the connection closes.
struct RawUpstream {
    RawUpstream(net::io_context& ioc, std::vector<std::string> answers_in, int close_after = -1)
        : acceptor(ioc, tcp::endpoint(net::ip::make_address("127.0.0.1"), 0)),
          answers(std::move(answers_in)) {
        port = acceptor.local_endpoint().port();
        net::co_spawn(ioc, serve(close_after), net::detached);
    }
    awaitable<void> serve(int close_after) {
        for (;;) {
            auto [ec, sock] = co_await acceptor.async_accept();
            if (ec) {
                co_return;
            }
            ++accepted;
            beast::tcp_stream s(std::move(sock));
            beast::flat_buffer buf;
            while (next < answers.size()) {
                http::request<http::string_body> req;
                auto [rec, rn] = co_await http::async_read(s, buf, req, use_tuple);
                (void)rn;
                if (rec) {
                    break;
                }
                const int i = static_cast<int>(next++);
                co_await write_raw(s, answers[i]);
                if (i == close_after) {
                    error_code sec;
                    s.socket().shutdown(tcp::socket::shutdown_send, sec);
                    break;
                }
            }
            // Held open (without a FIN unless the answer ends with the connection) until the
            // client goes, at most 5 s.
            co_await read_until_close(s, Duration{5000});
        }
    }
    Acceptor acceptor;
    std::vector<std::string> answers;
    std::size_t next = 0;
    int accepted = 0;
    unsigned short port = 0;
};

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
    RawUpstream up(ioc_, {"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                          "Transfer-Encoding: chunked\r\n\r\n"
                          "9\r\ndata: 0\n\n\r\n9\r\ndata: 1\n\n\r\nzz\r\n"});
    run([&]() -> awaitable<void> {
        Client client(ioc_.get_executor());
        ReadBack r = co_await open_and_read(client, up.port, "/events", quick());
        if (!r.stream) {
            co_return;
        }
        EXPECT_EQ(r.body, "data: 0\n\ndata: 1\n\n");
        EXPECT_EQ(r.failure, Failure::Protocol) << to_string(r.failure);
        EXPECT_FALSE(r.stream->done());
        std::string more;
        EXPECT_NE(co_await r.stream->read_some(more), Failure::None);  // and stays failed
        EXPECT_TRUE(more.empty());
        EXPECT_EQ(client.idle_connections(), 0u);
    }());
}

// The three ways a body ends (RFC 9112 6.3), read piece by piece on one connection: after its
// last chunk (extensions and trailers read and dropped) and after its length, the connection
// is pooled and carries the next request; a body that ends with the connection is whole at
// EOF, and the connection is not pooled.
TEST_F(StreamClientTest, BodiesEndByChunksByLengthOrByClose) {
    RawUpstream up(ioc_,
                   {"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                    "5;a=\"b;c\"\r\nhello\r\n1 ; x\r\n \r\n5\r\nworld\r\n"
                    "0\r\nX-Trailer: v\r\n\r\n",
                    "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nabcde",
                    "HTTP/1.1 200 OK\r\n\r\nuntil the end"},
                   2);
    run([&]() -> awaitable<void> {
        Client client(ioc_.get_executor());
        for (std::string_view want : {"hello world", "abcde", "until the end"}) {
            SCOPED_TRACE(want);
            ReadBack r = co_await open_and_read(client, up.port, "/r", quick());
            if (!r.stream) {
                co_return;
            }
            EXPECT_EQ(r.failure, Failure::None) << to_string(r.failure);
            EXPECT_TRUE(r.stream->done());
            EXPECT_EQ(r.body, want);
            EXPECT_EQ(client.idle_connections(), want == "until the end" ? 0u : 1u);
        }
    }());
    EXPECT_EQ(up.accepted, 1);  // the first two answers' connection carried all three
}

// Bytes after the end of a body (an upstream that wrote more than its answer) are not taken
// into it, and the connection is not pooled with them.
TEST_F(StreamClientTest, BytesAfterTheBodyAreNotPartOfIt) {
    RawUpstream length(ioc_, {"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nabcdeXYZ"});
    RawUpstream chunks(ioc_, {"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                              "5\r\nabcde\r\n0\r\n\r\nXYZ"});
    run([&]() -> awaitable<void> {
        Client client(ioc_.get_executor());
        for (unsigned short port : {length.port, chunks.port}) {
            ReadBack r = co_await open_and_read(client, port, "/r", quick());
            if (!r.stream) {
                co_return;
            }
            EXPECT_EQ(r.failure, Failure::None) << to_string(r.failure);
            EXPECT_TRUE(r.stream->done());
            EXPECT_EQ(r.body, "abcde");
        }
        EXPECT_EQ(client.idle_connections(), 0u);
    }());
}

// A declared length over Beast's default body limit (8 MiB for a response) opens: the body is
// read piece by piece, and the size limit is read_all's (PoolLimits::max_response_body).
TEST_F(StreamClientTest, ALengthOverEightMebibytesOpens) {
    RawUpstream up(ioc_, {"HTTP/1.1 200 OK\r\nContent-Length: 8388609\r\n\r\nabc"}, 0);
    run([&]() -> awaitable<void> {
        Client client(ioc_.get_executor());
        ReadBack r = co_await open_and_read(client, up.port, "/r", quick());
        EXPECT_EQ(r.body, "abc");
        EXPECT_EQ(r.failure, Failure::Read) << to_string(r.failure);  // cut short by the close
    }());
}

// Each read of a body waits under Timeouts::idle, also one served from what is already buffered:
// a caller that reads the head and its first event (here, in one segment) and then takes
// longer than the response timeout to come back (a slow client) still gets the next event.
TEST_F(StreamClientTest, ABufferedReadArmsTheIdleTimeout) {
    Acceptor acceptor(ioc_, tcp::endpoint(net::ip::make_address("127.0.0.1"), 0));
    const unsigned short port = acceptor.local_endpoint().port();
    Event more(ioc_.get_executor());
    auto serve = [&]() -> awaitable<void> {
        auto [ec, sock] = co_await acceptor.async_accept();
        if (ec) {
            co_return;
        }
        beast::tcp_stream s(std::move(sock));
        if (co_await read_one_request(s)) {
            co_return;
        }
        co_await write_raw(s,
                           "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                           "9\r\ndata: 0\n\n\r\n");
        if (co_await more.wait(Duration{5000})) {
            co_await write_raw(s, "9\r\ndata: 1\n\n\r\n0\r\n\r\n");
        }
        co_await read_until_close(s, Duration{5000});
    };
    net::co_spawn(ioc_, serve(), net::detached);
    run([&]() -> awaitable<void> {
        Client client(ioc_.get_executor());
        Timeouts t = quick();
        t.response = Duration{500};
        t.idle = Duration{10'000};
        const Endpoint ep{"127.0.0.1", port};
        auto o = co_await client.open(ep, make_req(http::verb::get, "/r"), t);
        if (!o.stream) {
            ADD_FAILURE() << to_string(o.failure);
            co_return;
        }
        std::string got;
        EXPECT_EQ(co_await o.stream->read_some(got), Failure::None);
        EXPECT_EQ(got, "data: 0\n\n");
        co_await sleep_for(Duration{1000});  // past the response timeout
        more.set();
        std::string next;
        Failure f = Failure::None;
        for (int i = 0; i < 4 && f == Failure::None && next.empty(); ++i) {
            f = co_await o.stream->read_some(next);
        }
        EXPECT_EQ(f, Failure::None) << to_string(f);
        EXPECT_EQ(next, "data: 1\n\n");
    }());
    acceptor.close();
}

// A chunk-size line that can no longer be valid fails the leg when its bad byte arrives, even
// though the line has not ended and the upstream then sends nothing more (Beast's parser
// waited for the line's end: the leg hung until its idle timeout, 60 s here). The body bytes
// before it go out first.
TEST_F(StreamClientTest, AMalformedChunkLineFailsAtOnce) {
    RawUpstream up(ioc_, {"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                          "5\r\nhello\r\n1;("});
    run([&]() -> awaitable<void> {
        Client client(ioc_.get_executor());
        Timeouts t = quick();
        t.idle = Duration{60'000};
        ReadBack r = co_await open_and_read(client, up.port, "/r", t);
        EXPECT_EQ(r.body, "hello");
        EXPECT_EQ(r.failure, Failure::Protocol) << to_string(r.failure);
        EXPECT_EQ(client.idle_connections(), 0u);
    }());
}

// A body that says where it ends (a length, chunks) cut short by the upstream's close: a read
// failure after the bytes that came, never a complete body.
TEST_F(StreamClientTest, ABodyCutShortByACloseIsAReadFailure) {
    RawUpstream length(ioc_, {"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc"}, 0);
    RawUpstream chunks(ioc_, {"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nabc"}, 0);
    run([&]() -> awaitable<void> {
        Client client(ioc_.get_executor());
        for (unsigned short port : {length.port, chunks.port}) {
            ReadBack r = co_await open_and_read(client, port, "/r", quick());
            if (!r.stream) {
                co_return;
            }
            EXPECT_EQ(r.body, "abc");
            EXPECT_EQ(r.failure, Failure::Read) << to_string(r.failure);
            EXPECT_FALSE(r.stream->done());
        }
        EXPECT_EQ(client.idle_connections(), 0u);
    }());
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
