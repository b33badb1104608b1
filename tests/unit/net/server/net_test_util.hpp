#pragma once
// Helpers for loopback tests of the net layer: run a test coroutine on an io_context with a
// bounded deadline, raw client sockets, and a timer used as a one-shot event.
#include "net/common/io.hpp"

#include <boost/asio/experimental/awaitable_operators.hpp>

#include <gtest/gtest.h>

#include <chrono>
#include <exception>
#include <string>

namespace pdr::testing {

using namespace std::chrono_literals;

// Runs `body` on `ioc` until it finishes or `limit` passes. Fails the test on timeout or
// exception. Other work on the context (servers) may still be pending afterwards.
inline void run_test(net::io_context& ioc, awaitable<void> body,
                     std::chrono::milliseconds limit = 10s) {
    bool done = false;
    std::exception_ptr error;
    net::co_spawn(ioc, std::move(body), [&](std::exception_ptr e) {
        done = true;
        error = e;
    });
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (!done && std::chrono::steady_clock::now() < deadline) {
        ioc.run_one_for(deadline - std::chrono::steady_clock::now());
        if (ioc.stopped()) {
            ioc.restart();
        }
    }
    ASSERT_TRUE(done) << "test coroutine did not finish in time";
    if (error) {
        std::rethrow_exception(error);
    }
}

// A timer that never fires on its own; cancel() wakes the waiter (one-shot event).
class Event {
public:
    explicit Event(const net::any_io_executor& ex) : timer_(ex) {
        timer_.expires_at(Timer::time_point::max());
    }
    void set() {
        set_ = true;
        timer_.cancel();
    }
    bool is_set() const { return set_; }
    // True if the event was set within `limit`.
    awaitable<bool> wait(Duration limit) {
        const auto deadline = Clock::now() + limit;
        while (!set_ && Clock::now() < deadline) {
            timer_.expires_at(deadline);
            co_await timer_.async_wait();
        }
        co_return set_;
    }

private:
    Timer timer_;
    bool set_ = false;
};

inline awaitable<void> sleep_for(Duration d) {
    Timer t(co_await net::this_coro::executor);
    t.expires_after(d);
    co_await t.async_wait();
}

// Connects a raw socket to 127.0.0.1:port (or the given address).
inline awaitable<beast::tcp_stream> connect_raw(unsigned short port,
                                                const char* addr = "127.0.0.1") {
    beast::tcp_stream s(co_await net::this_coro::executor);
    s.expires_after(Duration{2000});
    auto [ec] =
        co_await s.async_connect(tcp::endpoint(net::ip::make_address(addr), port), use_tuple);
    EXPECT_FALSE(ec) << ec.message();
    co_return s;
}

inline awaitable<error_code> write_raw(beast::tcp_stream& s, std::string_view data) {
    s.expires_after(Duration{2000});
    auto [ec, n] = co_await net::async_write(s, net::buffer(data.data(), data.size()), use_tuple);
    (void)n;
    co_return ec;
}

// Reads one response (bounded by `limit`); the error is set on failure.
struct RawResponse {
    error_code ec;
    http::response<http::string_body> msg;
};
inline awaitable<RawResponse> read_response(beast::tcp_stream& s, beast::flat_buffer& buf,
                                            Duration limit = Duration{3000}) {
    RawResponse r;
    http::response_parser<http::string_body> p;
    s.expires_after(limit);
    auto [ec, n] = co_await http::async_read(s, buf, p, use_tuple);
    (void)n;
    r.ec = ec;
    if (!ec) {
        r.msg = p.release();
    }
    co_return r;
}

// One exchange on a fresh raw connection: connect, send `request` as it is, read one response.
inline awaitable<RawResponse> exchange_raw(unsigned short port, std::string_view request) {
    auto s = co_await connect_raw(port);
    beast::flat_buffer buf;
    co_await write_raw(s, request);
    co_return co_await read_response(s, buf);
}

// Reads one request from `s` (a fake upstream's side of a test): its error, or none.
inline awaitable<error_code> read_one_request(beast::tcp_stream& s) {
    beast::flat_buffer buf;
    http::request<http::string_body> req;
    auto [ec, n] = co_await http::async_read(s, buf, req, use_tuple);
    (void)n;
    co_return ec;
}

// Reads until the peer closes (or `limit`); returns what was read.
inline awaitable<std::string> read_until_close(beast::tcp_stream& s, Duration limit) {
    std::string out;
    char buf[4096];
    s.expires_after(limit);
    for (;;) {
        auto [ec, n] = co_await s.async_read_some(net::buffer(buf), use_tuple);
        out.append(buf, n);
        if (ec) {
            break;
        }
    }
    co_return out;
}

}  // namespace pdr::testing
