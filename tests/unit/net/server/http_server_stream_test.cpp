// HttpServer on loopback: chunked streaming, client-disconnect detection and handler
// cancellation, abort, and graceful drain.
#include "net/server/http_server.hpp"

#include "tests/unit/net/server/net_test_util.hpp"

#include <gtest/gtest.h>

#include <functional>

namespace pdr::server {
namespace {

using namespace pdr::testing;

class StreamTest : public ::testing::Test {
public:  // also used by the helpers below
    void start(Handler h, Limits limits = {}) {
        server_ = std::make_unique<HttpServer>(ioc_.get_executor(), limits, std::move(h));
        port_ = server_->listen("127.0.0.1", 0);
        server_->start();
    }
    void run(awaitable<void> body) { run_test(ioc_, std::move(body)); }

    net::io_context ioc_;
    std::unique_ptr<HttpServer> server_;
    unsigned short port_ = 0;
};

http::response<http::empty_body> sse_head() {
    http::response<http::empty_body> head{http::status::ok, 11};
    head.set(http::field::content_type, "text/event-stream");
    return head;
}

// The client sees chunk 1 while the handler is still waiting for the client to see it.
TEST_F(StreamTest, ChunksArriveOneByOne) {
    Event seen_first(ioc_.get_executor());
    bool handler_saw_signal = false;
    error_code late_respond;
    start([&](Exchange& ex) -> awaitable<void> {
        EXPECT_FALSE(co_await ex.begin_stream(sse_head()));
        EXPECT_TRUE(ex.responded());
        EXPECT_FALSE(co_await ex.write_chunk("data: one\n\n"));
        handler_saw_signal = co_await seen_first.wait(Duration{3000});
        EXPECT_FALSE(co_await ex.write_chunk("data: two\n\n"));
        EXPECT_FALSE(co_await ex.end_stream());
        Response late{http::status::ok, 11};
        late_respond = co_await ex.respond(std::move(late));
    });
    run([&]() -> awaitable<void> {
        auto s = co_await connect_raw(port_);
        beast::flat_buffer buf;
        co_await write_raw(s,
                           "POST /v1/completions HTTP/1.1\r\nHost: a\r\n"
                           "Content-Length: 2\r\n\r\n{}");
        http::response_parser<http::buffer_body> p;
        s.expires_after(Duration{3000});
        auto [hec, hn] = co_await http::async_read_header(s, buf, p, use_tuple);
        (void)hn;
        EXPECT_FALSE(hec);
        EXPECT_TRUE(p.get().chunked());
        std::string body;
        char piece[256];
        while (!p.is_done()) {
            p.get().body().data = piece;
            p.get().body().size = sizeof piece;
            auto [ec, n] = co_await http::async_read_some(s, buf, p, use_tuple);
            (void)n;
            if (ec && ec != http::error::need_buffer) {
                ADD_FAILURE() << ec.message();
                break;
            }
            body.append(piece, sizeof piece - p.get().body().size);
            if (body == "data: one\n\n" && !seen_first.is_set()) {
                seen_first.set();  // the handler is waiting for this before chunk 2
            }
        }
        EXPECT_EQ(body, "data: one\n\ndata: two\n\n");
        EXPECT_TRUE(p.keep_alive());
    }());
    EXPECT_TRUE(handler_saw_signal);
    EXPECT_EQ(late_respond, net::error::already_started);
}

// begin_stream_held: nothing reaches the client until the first chunk, which then carries the
// head; write_last_chunk_or_rest ends the body with its chunk; the connection stays usable.
TEST_F(StreamTest, HeldHeadGoesWithTheFirstChunkAndTheLastChunkEndsTheBody) {
    Event held(ioc_.get_executor());
    Event checked(ioc_.get_executor());
    int requests = 0;
    start([&](Exchange& ex) -> awaitable<void> {
        if (++requests > 1) {
            // the second request on the connection: an empty held stream (head and end only)
            EXPECT_FALSE(co_await ex.begin_stream_held(sse_head()));
            EXPECT_FALSE(co_await ex.end_stream());
            co_return;
        }
        EXPECT_FALSE(co_await ex.begin_stream_held(sse_head()));
        EXPECT_TRUE(ex.responded());
        EXPECT_EQ(co_await ex.begin_stream(sse_head()), net::error::already_started);
        held.set();
        EXPECT_TRUE(co_await checked.wait(Duration{3000}));
        EXPECT_FALSE(co_await ex.write_chunk("data: one\n\n"));
        error_code ec;
        if (auto rest = ex.write_last_chunk_or_rest("data: two\n\n", ec)) {
            ec = co_await std::move(*rest);
        }
        EXPECT_FALSE(ec);
        ec = {};
        EXPECT_FALSE(ex.write_chunk_or_rest("data: late\n\n", ec));  // the body has ended
        EXPECT_EQ(ec, net::error::operation_not_supported);
        EXPECT_EQ(co_await ex.end_stream(), net::error::operation_not_supported);
    });
    run([&]() -> awaitable<void> {
        auto s = co_await connect_raw(port_);
        beast::flat_buffer buf;
        const std::string req =
            "POST /v1/completions HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n\r\n{}";
        co_await write_raw(s, req);
        EXPECT_TRUE(co_await held.wait(Duration{3000}));
        // begin_stream would have written the head before returning: none of it is here
        EXPECT_EQ(s.socket().available(), 0u);
        checked.set();
        auto first = co_await read_response(s, buf);
        EXPECT_FALSE(first.ec) << first.ec.message();
        EXPECT_EQ(first.msg.result_int(), 200u);
        EXPECT_EQ(first.msg[http::field::content_type], "text/event-stream");
        EXPECT_TRUE(first.msg.chunked());
        EXPECT_EQ(first.msg.body(), "data: one\n\ndata: two\n\n");
        EXPECT_TRUE(first.msg.keep_alive());
        co_await write_raw(s, req);
        auto second = co_await read_response(s, buf);
        EXPECT_FALSE(second.ec) << second.ec.message();
        EXPECT_EQ(second.msg.result_int(), 200u);
        EXPECT_TRUE(second.msg.chunked());
        EXPECT_EQ(second.msg.body(), "");
    }());
    EXPECT_EQ(requests, 2);
}

// A held head to an HTTP/1.0 client: the head and the data, no chunk framing, the close ends
// the body.
TEST_F(StreamTest, HeldHeadToAnHttp10ClientEndsWithTheClose) {
    start([&](Exchange& ex) -> awaitable<void> {
        EXPECT_FALSE(co_await ex.begin_stream_held(sse_head()));
        error_code ec;
        if (auto rest = ex.write_last_chunk_or_rest("data: only\n\n", ec)) {
            ec = co_await std::move(*rest);
        }
        EXPECT_FALSE(ec);
    });
    run([&]() -> awaitable<void> {
        auto s = co_await connect_raw(port_);
        co_await write_raw(s, "POST /v1/completions HTTP/1.0\r\nContent-Length: 2\r\n\r\n{}");
        const std::string got = co_await read_until_close(s, Duration{3000});
        EXPECT_TRUE(got.starts_with("HTTP/1.0 200 OK\r\n")) << got;
        EXPECT_EQ(got.find("chunked"), std::string::npos) << got;
        EXPECT_TRUE(got.ends_with("\r\n\r\ndata: only\n\n")) << got;
    }());
}

// The one signal of a client that went away: the handler's coroutine is cancelled through its
// cancellation slot. Its pending wait ends at once, client_gone() is already true, the
// cancellation state says terminal, and the next co_await throws (the handler unwinds).
TEST_F(StreamTest, ClientDisconnectCancelsHandler) {
    Event handler_started(ioc_.get_executor());
    Event handler_ended(ioc_.get_executor());
    error_code wait_ec;
    bool gone_when_cancelled = false;
    net::cancellation_type cancelled = net::cancellation_type::none;
    error_code next_await;
    start([&](Exchange& ex) -> awaitable<void> {
        EXPECT_FALSE(co_await ex.begin_stream(sse_head()));
        handler_started.set();
        Timer t(co_await net::this_coro::executor);
        t.expires_after(Duration{10'000});
        auto [ec] = co_await t.async_wait();
        wait_ec = ec;
        gone_when_cancelled = ex.client_gone();
        const net::cancellation_state state = co_await net::this_coro::cancellation_state;
        cancelled = state.cancelled();
        handler_ended.set();
        try {
            t.expires_after(Duration{10'000});
            co_await t.async_wait();
        } catch (const boost::system::system_error& e) {
            next_await = e.code();
            throw;
        }
    });
    run([&]() -> awaitable<void> {
        auto s = co_await connect_raw(port_);
        co_await write_raw(s, "GET /s HTTP/1.1\r\nHost: a\r\n\r\n");
        EXPECT_TRUE(co_await handler_started.wait(Duration{3000}));
        const auto closed_at = Clock::now();
        s.close();
        EXPECT_TRUE(co_await handler_ended.wait(Duration{3000}));
        EXPECT_LT(Clock::now() - closed_at, Duration{100});
        EXPECT_EQ(wait_ec, net::error::operation_aborted);
        EXPECT_TRUE(gone_when_cancelled);
        EXPECT_EQ(cancelled, net::cancellation_type::terminal);
        // The connection coroutine ends too.
        for (int i = 0; i < 100 && server_->active_connections() > 0; ++i) {
            co_await sleep_for(Duration{10});
        }
        EXPECT_EQ(server_->active_connections(), 0u);
        EXPECT_EQ(next_await, net::error::operation_aborted);
    }());
}

TEST_F(StreamTest, AbortTruncatesTheStream) {
    start([](Exchange& ex) -> awaitable<void> {
        co_await ex.begin_stream(sse_head());
        co_await ex.write_chunk("data: partial\n\n");
        ex.abort();
        EXPECT_TRUE(co_await ex.write_chunk("more"));  // fails: connection is closed
    });
    run([&]() -> awaitable<void> {
        auto s = co_await connect_raw(port_);
        co_await write_raw(s, "GET /s HTTP/1.1\r\nHost: a\r\n\r\n");
        std::string all = co_await read_until_close(s, Duration{3000});
        EXPECT_NE(all.find("data: partial"), std::string::npos);
        EXPECT_EQ(all.find("0\r\n\r\n"), std::string::npos);  // no last chunk
    }());
}

// HTTP/1.0 has no chunked encoding: a stream goes out as the plain bytes, ended by the close.
TEST_F(StreamTest, Http10ClientGetsAPlainBodyEndedByTheClose) {
    start([](Exchange& ex) -> awaitable<void> {
        EXPECT_FALSE(co_await ex.begin_stream(sse_head()));
        EXPECT_FALSE(co_await ex.write_chunk("data: one\n\n"));
        EXPECT_FALSE(co_await ex.write_chunk("data: two\n\n"));
        EXPECT_FALSE(co_await ex.end_stream());
    });
    run([&]() -> awaitable<void> {
        auto s = co_await connect_raw(port_);
        co_await write_raw(s, "GET /s HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
        std::string all = co_await read_until_close(s, Duration{3000});
        const auto split = all.find("\r\n\r\n");
        EXPECT_NE(split, std::string::npos) << all;
        if (split == std::string::npos) {
            co_return;
        }
        const std::string head = all.substr(0, split);
        EXPECT_EQ(head.rfind("HTTP/1.0 200", 0), 0u) << head;
        EXPECT_EQ(head.find("chunked"), std::string::npos) << head;
        EXPECT_EQ(all.substr(split + 4), "data: one\n\ndata: two\n\n");
    }());
}

TEST_F(StreamTest, DrainFinishesInFlightAndClosesIdle) {
    start([](Exchange& ex) -> awaitable<void> {
        if (ex.request().target() == "/slow") {
            co_await sleep_for(Duration{200});
        }
        Response res{http::status::ok, 11};
        co_await ex.respond(std::move(res));
    });
    run([&]() -> awaitable<void> {
        auto idle = co_await connect_raw(port_);
        beast::flat_buffer ibuf;
        co_await write_raw(idle, "GET /fast HTTP/1.1\r\nHost: a\r\n\r\n");
        auto r0 = co_await read_response(idle, ibuf);
        EXPECT_EQ(r0.msg.result_int(), 200u);

        auto busy = co_await connect_raw(port_);
        beast::flat_buffer bbuf;
        co_await write_raw(busy, "GET /slow HTTP/1.1\r\nHost: a\r\n\r\n");
        for (int i = 0; i < 100 && server_->active_connections() < 2; ++i) {
            co_await sleep_for(Duration{5});
        }
        co_await sleep_for(Duration{20});  // the request has reached the handler
        const auto t0 = Clock::now();
        co_await server_->drain(Duration{3000});
        EXPECT_LT(Clock::now() - t0, Duration{2000});
        EXPECT_EQ(server_->active_connections(), 0u);
        auto r = co_await read_response(busy, bbuf);
        EXPECT_FALSE(r.ec) << r.ec.message();
        EXPECT_EQ(r.msg.result_int(), 200u);
        EXPECT_FALSE(r.msg.keep_alive());
        std::string rest = co_await read_until_close(idle, Duration{1000});
        EXPECT_TRUE(rest.empty());
        // No longer accepting.
        beast::tcp_stream late(co_await net::this_coro::executor);
        auto [ec] = co_await late.async_connect(
            tcp::endpoint(net::ip::make_address("127.0.0.1"), port_), use_tuple);
        EXPECT_TRUE(ec);
    }());
}

TEST_F(StreamTest, DrainGraceCancelsStuckHandler) {
    Event started(ioc_.get_executor());
    bool ended = false;
    start([&](Exchange& ex) -> awaitable<void> {
        co_await ex.begin_stream(sse_head());
        started.set();
        const auto t0 = Clock::now();
        co_await sleep_for(Duration{10'000});
        ended = Clock::now() - t0 > Duration{5000};
    });
    run([&]() -> awaitable<void> {
        auto s = co_await connect_raw(port_);
        co_await write_raw(s, "GET /stuck HTTP/1.1\r\nHost: a\r\n\r\n");
        EXPECT_TRUE(co_await started.wait(Duration{3000}));
        const auto t0 = Clock::now();
        co_await server_->drain(Duration{100});
        const auto took = Clock::now() - t0;
        EXPECT_GE(took, Duration{90});
        EXPECT_LT(took, Duration{1000});
        EXPECT_EQ(server_->active_connections(), 0u);
        EXPECT_FALSE(ended);  // cancelled, not slept out
    }());
}

// A stream whose handler did `begin` and then waits: the drain (100 ms grace) cuts it; returns
// all the client read until the close.
std::string cut_stream(StreamTest& t, std::function<awaitable<void>(Exchange&)> begin) {
    Event started(t.ioc_.get_executor());
    t.start([&](Exchange& ex) -> awaitable<void> {
        co_await begin(ex);
        started.set();
        co_await sleep_for(Duration{10'000});
    });
    std::string text;
    t.run([&]() -> awaitable<void> {
        auto s = co_await connect_raw(t.port_);
        co_await write_raw(s, "GET /stream HTTP/1.1\r\nHost: a\r\n\r\n");
        EXPECT_TRUE(co_await started.wait(Duration{3000}));
        co_await t.server_->drain(Duration{100});
        text = co_await read_until_close(s, Duration{3000});
    }());
    return text;
}

// A stream whose head is still held when the drain grace ends: the client gets the head, then
// the error event (and the close), not an error event without a head.
TEST_F(StreamTest, DrainGraceEndSendsAHeldHeadBeforeTheErrorEvent) {
    const std::string got = cut_stream(*this, [](Exchange& ex) -> awaitable<void> {
        EXPECT_FALSE(co_await ex.begin_stream_held(sse_head()));
    });
    EXPECT_TRUE(got.starts_with("HTTP/1.1 200 OK\r\n")) << got;
    const auto head_end = got.find("\r\n\r\n");
    const auto error = got.find("\r\ndata: {\"error\"");  // at a chunk's start
    EXPECT_NE(head_end, std::string::npos) << got;
    EXPECT_NE(error, std::string::npos) << got;
    EXPECT_LT(head_end, error) << got;
    EXPECT_NE(got.find("shutting_down", error), std::string::npos) << got;
}

// Two clients cut by a drain with a 100 ms grace: one waiting for its answer, one whose
// stream sent `first_event`. Each handler answers under the id "rid-<path>".
struct CutClients {
    RawResponse waiting;   // what the waiting client read
    std::string streamed;  // all the streaming client read until the close
};

CutClients drain_two_clients(StreamTest& t, std::string first_event);

// When the grace ends, clients still waiting are told: a 503 shutting_down (with the request
// id) to one that got no answer yet, an SSE error event after the last event to one whose
// stream is under way (then the close, no last chunk). An event ended by CRLF CRLF counts as
// ended: no blank line goes before the error event.
TEST_F(StreamTest, DrainGraceEndTellsWaitingClients) {
    for (std::string_view ending : {"\n\n", "\r\n\r\n"}) {
        SCOPED_TRACE(ending.size());
        const std::string first = "data: one" + std::string(ending);
        CutClients c = drain_two_clients(*this, first);
        EXPECT_EQ(server_->active_connections(), 0u);
        EXPECT_FALSE(c.waiting.ec) << c.waiting.ec.message();
        EXPECT_EQ(c.waiting.msg.result_int(), 503u);
        EXPECT_EQ(c.waiting.msg["X-Request-Id"], "rid-wait");
        EXPECT_NE(c.waiting.msg.body().find("\"shutting_down\""), std::string::npos);
        const std::string& text = c.streamed;
        const auto one = text.find(first);
        const auto error = text.find("\r\ndata: {\"error\"");  // at a chunk's start
        EXPECT_NE(one, std::string::npos) << text;
        EXPECT_NE(error, std::string::npos) << text;
        EXPECT_LT(one, error) << text;
        EXPECT_NE(text.find("shutting_down", error), std::string::npos) << text;
        EXPECT_EQ(text.find("\r\n0\r\n\r\n"), std::string::npos) << text;  // not ended cleanly
    }
}

// A kept-alive client that sent a CRLF after its request's body is idle: a drain closes it at
// once instead of waiting out the grace for a request that never comes.
TEST_F(StreamTest, DrainClosesAnIdleConnectionThatSentATrailingBlankLine) {
    start([](Exchange& ex) -> awaitable<void> {
        Response res{http::status::ok, 11};
        res.body() = "ok";
        co_await ex.respond(std::move(res));
    });
    run([&]() -> awaitable<void> {
        auto s = co_await connect_raw(port_);
        co_await write_raw(s, "POST /a HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n\r\nok\r\n");
        beast::flat_buffer buf;
        auto r = co_await read_response(s, buf);
        EXPECT_EQ(r.msg.result_int(), 200u) << r.ec.message();
        co_await sleep_for(Duration{50});  // the CRLF has been read
        const auto t0 = Clock::now();
        co_await server_->drain(Duration{3000});
        EXPECT_LT(Clock::now() - t0, Duration{1000});
        EXPECT_EQ(server_->active_connections(), 0u);
    }());
}

CutClients drain_two_clients(StreamTest& t, std::string first_event) {
    CutClients out;
    int started = 0;
    Event both(t.ioc_.get_executor());
    t.start([&](Exchange& ex) -> awaitable<void> {
        ex.set_request_id("rid-" + std::string(ex.request().target().substr(1)));
        if (ex.request().target() == "/stream") {
            co_await ex.begin_stream(sse_head());
            co_await ex.write_chunk(first_event);
        }
        if (++started == 2) {
            both.set();
        }
        co_await sleep_for(Duration{10'000});
    });
    t.run([&]() -> awaitable<void> {
        auto streamed = co_await connect_raw(t.port_);
        co_await write_raw(streamed, "GET /stream HTTP/1.1\r\nHost: a\r\n\r\n");
        auto waiting = co_await connect_raw(t.port_);
        co_await write_raw(waiting, "GET /wait HTTP/1.1\r\nHost: a\r\n\r\n");
        EXPECT_TRUE(co_await both.wait(Duration{3000}));
        co_await t.server_->drain(Duration{100});
        beast::flat_buffer buf;
        out.waiting = co_await read_response(waiting, buf);
        out.streamed = co_await read_until_close(streamed, Duration{2000});
    }());
    return out;
}

// The grace ends while a handler waits and more than the watcher's 64 KiB of pipelined bytes
// sit behind the request (the watcher has stopped reading): the handler is cancelled anyway,
// so the drain ends at once instead of waiting for the handler's own end.
TEST_F(StreamTest, DrainGraceEndCancelsAHandlerBehindPipelinedBytes) {
    Event started(ioc_.get_executor());
    bool slept_out = false;
    start([&](Exchange&) -> awaitable<void> {
        started.set();
        const auto t0 = Clock::now();
        co_await sleep_for(Duration{10'000});
        slept_out = Clock::now() - t0 > Duration{5000};
    });
    run([&]() -> awaitable<void> {
        auto s = co_await connect_raw(port_);
        const std::string big(100 * 1024, 'x');
        co_await write_raw(s,
                           "GET /wait HTTP/1.1\r\nHost: a\r\n\r\n"
                           "POST /next HTTP/1.1\r\nHost: a\r\nContent-Length: " +
                               std::to_string(big.size()) + "\r\n\r\n" + big);
        EXPECT_TRUE(co_await started.wait(Duration{3000}));
        const auto t0 = Clock::now();
        co_await server_->drain(Duration{100});
        EXPECT_LT(Clock::now() - t0, Duration{2000});
        EXPECT_EQ(server_->active_connections(), 0u);
        EXPECT_FALSE(slept_out);
        beast::flat_buffer buf;
        auto r = co_await read_response(s, buf);
        EXPECT_EQ(r.msg.result_int(), 503u) << r.ec.message();
    }());
}

// A stream whose last chunk did not end an event (an over-long event passed on in pieces):
// the shutdown's error event starts on a line of its own, after a blank line.
TEST_F(StreamTest, DrainGraceEndEndsAnUnfinishedEventBeforeTheErrorEvent) {
    const std::string text = cut_stream(*this, [](Exchange& ex) -> awaitable<void> {
        co_await ex.begin_stream(sse_head());
        co_await ex.write_chunk("data: {\"part\":");
    });
    EXPECT_NE(text.find("data: {\"part\":"), std::string::npos) << text;
    EXPECT_NE(text.find("\n\ndata: {\"error\""), std::string::npos) << text;
}

}  // namespace
}  // namespace pdr::server
