// HttpServer on loopback: plain answers, keep-alive, limits (413/431/400 with OpenAI bodies),
// Expect: 100-continue, chunked request bodies, pipelining, max_connections.
// Long: the conformance cases of one server share its raw-socket fixture.
#include "net/server/http_server.hpp"

#include "tests/unit/net/server/net_test_util.hpp"

#include <nlohmann/json.hpp>

#include <gtest/gtest.h>

namespace pdr::server {
namespace {

using namespace pdr::testing;

awaitable<void> echo_handler(Exchange& ex) {
    Response res{http::status::ok, 11};
    res.set(http::field::content_type, "text/plain");
    res.body() = std::string(ex.request().target()) + "|" + ex.request().body();
    co_await ex.respond(std::move(res));
}

class ServerTest : public ::testing::Test {
protected:
    void start(Limits limits = {}, Handler h = echo_handler) {
        server_ = std::make_unique<HttpServer>(ioc_.get_executor(), limits, std::move(h));
        port_ = server_->listen("127.0.0.1", 0);
        server_->start();
    }
    void run(awaitable<void> body) { run_test(ioc_, std::move(body)); }

    static void expect_openai_error(const http::response<http::string_body>& res, unsigned status,
                                    std::string_view code) {
        EXPECT_EQ(res.result_int(), status);
        EXPECT_FALSE(res.keep_alive());
        auto j = nlohmann::json::parse(res.body(), nullptr, false);
        ASSERT_TRUE(j.is_object()) << res.body();
        ASSERT_TRUE(j.contains("error"));
        EXPECT_EQ(j["error"]["code"], code);
        EXPECT_TRUE(j["error"]["message"].is_string());
        EXPECT_TRUE(j["error"]["type"].is_string());
        EXPECT_TRUE(j["error"]["param"].is_null());
    }

    net::io_context ioc_;
    std::unique_ptr<HttpServer> server_;
    unsigned short port_ = 0;
};

TEST_F(ServerTest, AnswersAndKeepsConnectionAlive) {
    start();
    run([this]() -> awaitable<void> {
        auto s = co_await connect_raw(port_);
        beast::flat_buffer buf;
        for (int i = 0; i < 3; ++i) {
            std::string req = "POST /x" + std::to_string(i) +
                              " HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\nabc";
            EXPECT_FALSE(co_await write_raw(s, req));
            auto r = co_await read_response(s, buf);
            EXPECT_FALSE(r.ec) << r.ec.message();
            EXPECT_EQ(r.msg.result_int(), 200u);
            EXPECT_EQ(r.msg.body(), "/x" + std::to_string(i) + "|abc");
            EXPECT_TRUE(r.msg.keep_alive());
        }
        EXPECT_EQ(server_->active_connections(), 1u);
        // Connection: close is honoured.
        EXPECT_FALSE(co_await write_raw(s, "GET /c HTTP/1.1\r\nConnection: close\r\n\r\n"));
        auto r = co_await read_response(s, buf);
        EXPECT_FALSE(r.ec);
        EXPECT_FALSE(r.msg.keep_alive());
        std::string rest = co_await read_until_close(s, Duration{2000});
        EXPECT_TRUE(rest.empty());
    }());
}

TEST_F(ServerTest, BodyOverLimitGets413) {
    Limits l;
    l.max_body_bytes = 1024;
    start(l);
    run([this]() -> awaitable<void> {
        std::string req =
            "POST / HTTP/1.1\r\nHost: a\r\nX-Request-Id: big-1\r\nContent-Length: "
            "5000\r\n\r\n" +
            std::string(5000, 'x');
        auto r = co_await exchange_raw(port_, req);
        EXPECT_FALSE(r.ec) << r.ec.message();
        expect_openai_error(r.msg, 413, "body_too_large");
        // the head was read: the answer carries the client's request id, as every answer does
        EXPECT_EQ(r.msg["X-Request-Id"], "big-1");
    }());
}

TEST_F(ServerTest, ChunkedBodyOverLimitGets413) {
    Limits l;
    l.max_body_bytes = 1024;
    start(l);
    run([this]() -> awaitable<void> {
        std::string req = "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n";
        for (int i = 0; i < 3; ++i) {
            req += "200\r\n" + std::string(0x200, 'y') + "\r\n";
        }
        req += "0\r\n\r\n";
        auto r = co_await exchange_raw(port_, req);
        EXPECT_FALSE(r.ec) << r.ec.message();
        expect_openai_error(r.msg, 413, "body_too_large");
    }());
}

// The body limit counts decoded bytes; the chunk framing around them is bounded too (4x the
// body limit plus the header limit and 32 KiB), or tiny chunks with long extensions would make
// the server read without end for a small body.
TEST_F(ServerTest, ChunkFramingFarBeyondTheBodyLimitGets413) {
    Limits l;
    l.max_body_bytes = 1024;
    l.max_header_bytes = 1024;
    start(l);
    run([this]() -> awaitable<void> {
        std::string req = "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n";
        const std::string chunk = "1;x=" + std::string(200, 'e') + "\r\na\r\n";
        for (int i = 0; i < 1000; ++i) {  // 1000 body bytes in ~210 KB of framing
            req += chunk;
        }
        req += "0\r\n\r\n";
        auto r = co_await exchange_raw(port_, req);
        EXPECT_FALSE(r.ec) << r.ec.message();
        expect_openai_error(r.msg, 413, "body_too_large");
        // the same body in a few chunks is fine
        auto ok = co_await exchange_raw(
            port_, "POST /f HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3e8\r\n" +
                       std::string(1000, 'a') + "\r\n0\r\n\r\n");
        EXPECT_EQ(ok.msg.result_int(), 200u);
    }());
}

TEST_F(ServerTest, HeadersOverLimitGet431) {
    Limits l;
    l.max_header_bytes = 1024;
    start(l);
    run([this]() -> awaitable<void> {
        std::string req =
            "GET / HTTP/1.1\r\nHost: a\r\nX-Big: " + std::string(4000, 'h') + "\r\n\r\n";
        auto r = co_await exchange_raw(port_, req);
        EXPECT_FALSE(r.ec) << r.ec.message();
        expect_openai_error(r.msg, 431, "headers_too_large");
        // no head to take an id from: a fresh one, so the answer can still be told apart
        EXPECT_EQ(r.msg["X-Request-Id"].size(), 36u) << r.msg;
    }());
}

TEST_F(ServerTest, MalformedRequestGets400) {
    start();
    run([this]() -> awaitable<void> {
        auto r = co_await exchange_raw(port_, "GET / HTTP/1.1\r\nBad Header Line\r\n\r\n");
        EXPECT_FALSE(r.ec) << r.ec.message();
        expect_openai_error(r.msg, 400, "bad_http_request");
    }());
}

// A chunk-size line or a trailer block is held whole by the parser and bounded by neither the
// header nor the body limit: past wire::kMaxUnparsed it is refused, the buffer does not grow.
TEST_F(ServerTest, EndlessChunkExtensionOrTrailerGets400) {
    start();
    run([this]() -> awaitable<void> {
        const std::string head = "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n";
        auto ext = co_await exchange_raw(port_, head + "3;ext=" + std::string(200'000, 'e'));
        EXPECT_FALSE(ext.ec) << ext.ec.message();
        expect_openai_error(ext.msg, 400, "bad_http_request");
        auto trailer = co_await exchange_raw(
            port_, head + "3\r\nabc\r\n0\r\nX-T: " + std::string(200'000, 't'));
        EXPECT_FALSE(trailer.ec) << trailer.ec.message();
        expect_openai_error(trailer.msg, 400, "bad_http_request");
        // ordinary ones still pass
        auto ok = co_await exchange_raw(port_, head + "3;a=b\r\nabc\r\n0\r\nX-T: v\r\n\r\n");
        EXPECT_EQ(ok.msg.result_int(), 200u);
        EXPECT_EQ(ok.msg.body(), "/|abc");
    }());
}

// RFC 9112 6.3: a Transfer-Encoding that is not (only) chunked leaves the body's length unknown;
// accepting it would take the body for the next request (smuggling).
TEST_F(ServerTest, TransferEncodingOtherThanChunkedGets400AndNothingElseIsServed) {
    start();
    run([this]() -> awaitable<void> {
        const std::string smuggled = "GET /smuggled HTTP/1.1\r\nHost: a\r\n\r\n";
        for (const char* te : {"gzip", "identity", "gzip, chunked", "chunked, gzip"}) {
            SCOPED_TRACE(te);
            auto s = co_await connect_raw(port_);
            beast::flat_buffer buf;
            co_await write_raw(
                s, std::string("POST /a HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: ") + te +
                       "\r\n\r\n" + smuggled);
            auto r = co_await read_response(s, buf);
            EXPECT_FALSE(r.ec) << r.ec.message();
            expect_openai_error(r.msg, 400, "bad_http_request");
            std::string rest = co_await read_until_close(s, Duration{3000});
            EXPECT_EQ(rest.find("smuggled"), std::string::npos) << rest;
        }
        auto two = co_await exchange_raw(port_,
                                         "POST /a HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: "
                                         "chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n");
        EXPECT_EQ(two.msg.result_int(), 400u);
        auto upper = co_await exchange_raw(port_,
                                           "POST /u HTTP/1.1\r\nHost: a\r\nTransfer-Encoding:  "
                                           "Chunked \r\n\r\n2\r\nok\r\n0\r\n\r\n");
        EXPECT_EQ(upper.msg.result_int(), 200u);
        EXPECT_EQ(upper.msg.body(), "/u|ok");
    }());
}

TEST_F(ServerTest, ChunkedRequestBodyIsDecoded) {
    start();
    run([this]() -> awaitable<void> {
        auto r = co_await exchange_raw(
            port_,
            "POST /c HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
            "3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n");
        EXPECT_FALSE(r.ec) << r.ec.message();
        EXPECT_EQ(r.msg.body(), "/c|abcde");
    }());
}

TEST_F(ServerTest, ExpectContinueGets100BeforeBody) {
    start();
    run([this]() -> awaitable<void> {
        auto s = co_await connect_raw(port_);
        beast::flat_buffer buf;
        const std::string body(4096, 'b');
        co_await write_raw(s,
                           "POST /e HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\n"
                           "Content-Length: 4096\r\n\r\n");
        // The interim answer arrives without the body having been sent.
        http::response_parser<http::empty_body> interim;
        s.expires_after(Duration{1000});
        auto [ec, n] = co_await http::async_read_header(s, buf, interim, use_tuple);
        (void)n;
        EXPECT_FALSE(ec) << ec.message();
        EXPECT_EQ(interim.get().result_int(), 100u);
        co_await write_raw(s, body);
        auto r = co_await read_response(s, buf);
        EXPECT_FALSE(r.ec) << r.ec.message();
        EXPECT_EQ(r.msg.body(), "/e|" + body);
    }());
}

// RFC 9110 10.1.1: an HTTP/1.0 request's 100-continue is ignored; the answer is the only one.
TEST_F(ServerTest, Http10ExpectContinueGetsNoInterimAnswer) {
    start();
    run([this]() -> awaitable<void> {
        auto s = co_await connect_raw(port_);
        co_await write_raw(s,
                           "POST /e HTTP/1.0\r\nHost: a\r\nExpect: 100-continue\r\n"
                           "Content-Length: 3\r\n\r\n");
        co_await sleep_for(Duration{100});  // room for a wrong interim answer to go out first
        co_await write_raw(s, "abc");
        const std::string text = co_await read_until_close(s, Duration{2000});
        EXPECT_EQ(text.rfind("HTTP/1.0 200 OK\r\n", 0), 0u) << text;
        EXPECT_EQ(text.find(" 100 "), std::string::npos) << text;
        EXPECT_NE(text.find("/e|abc"), std::string::npos) << text;
    }());
}

// RFC 9112 2.2: empty lines before a request line are ignored (a CRLF after a POST body).
TEST_F(ServerTest, BlankLinesBeforeARequestLineAreIgnored) {
    start();
    run([this]() -> awaitable<void> {
        auto s = co_await connect_raw(port_);
        co_await write_raw(s,
                           "\r\nPOST /a HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\nabc\r\n"
                           "GET /b HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n");
        beast::flat_buffer buf;
        auto a = co_await read_response(s, buf);
        EXPECT_FALSE(a.ec) << a.ec.message();
        EXPECT_EQ(a.msg.result_int(), 200u);
        EXPECT_EQ(a.msg.body(), "/a|abc");
        auto b = co_await read_response(s, buf);
        EXPECT_FALSE(b.ec) << b.ec.message();
        EXPECT_EQ(b.msg.result_int(), 200u);
        EXPECT_EQ(b.msg.body(), "/b|");
    }());
}

TEST_F(ServerTest, OtherHttpMajorVersionGets505) {
    start();
    run([this]() -> awaitable<void> {
        for (std::string_view line :
             {"GET / HTTP/2.0\r\n", "GET / HTTP/0.9\r\n", "GET / HTTP/3.1\r\n"}) {
            auto r = co_await exchange_raw(port_, std::string(line) + "Host: a\r\n\r\n");
            EXPECT_FALSE(r.ec) << r.ec.message();
            expect_openai_error(r.msg, 505, "http_version_not_supported");
        }
        // a version that is not well formed is a malformed request, whatever a later line says
        for (std::string_view bad :
             {"GET / HTTP/x.1\r\nHost: a\r\n\r\n", "GET / HTTP/1.2\nX: y HTTP/2.0\r\n\r\n"}) {
            auto r = co_await exchange_raw(port_, bad);
            EXPECT_FALSE(r.ec) << r.ec.message();
            expect_openai_error(r.msg, 400, "bad_http_request");
        }
    }());
}

// RFC 9110 6.2: a later HTTP/1.x is answered as 1.1, not refused.
TEST_F(ServerTest, LaterHttp1MinorVersionIsServedAs11) {
    start();
    run([this]() -> awaitable<void> {
        auto s = co_await connect_raw(port_);
        beast::flat_buffer buf;
        for (int i = 0; i < 2; ++i) {  // kept alive as 1.1
            co_await write_raw(s, "POST /v HTTP/1.2\r\nHost: a\r\nContent-Length: 2\r\n\r\nok");
            auto r = co_await read_response(s, buf);
            EXPECT_FALSE(r.ec) << r.ec.message();
            EXPECT_EQ(r.msg.result_int(), 200u);
            EXPECT_EQ(r.msg.version(), 11u);
            EXPECT_EQ(r.msg.body(), "/v|ok");
        }
    }());
}

// Blank lines that arrive apart from the request line (one packet each) are skipped too.
TEST_F(ServerTest, BlankLinesInTheirOwnPacketsAreSkipped) {
    start();
    run([this]() -> awaitable<void> {
        auto s = co_await connect_raw(port_);
        for (std::string_view part : {"\r\n", "\n", "\r\n"}) {
            co_await write_raw(s, part);
            co_await sleep_for(Duration{20});  // so each goes in its own segment
        }
        co_await write_raw(s, "GET /p HTTP/1.1\r\nHost: a\r\n\r\n");
        beast::flat_buffer buf;
        auto r = co_await read_response(s, buf);
        EXPECT_FALSE(r.ec) << r.ec.message();
        EXPECT_EQ(r.msg.result_int(), 200u);
        EXPECT_EQ(r.msg.body(), "/p|");
    }());
}

// Blank lines without end: past the header limit they are a malformed request, not a wait
// that lasts until the read timeout.
TEST_F(ServerTest, EndlessBlankLinesGet400) {
    Limits limits;
    limits.max_header_bytes = 1024;
    start(limits);
    run([this]() -> awaitable<void> {
        auto s = co_await connect_raw(port_);
        const std::string blank(600, '\n');
        for (int i = 0; i < 4; ++i) {
            co_await write_raw(s, blank);
        }
        beast::flat_buffer buf;
        auto r = co_await read_response(s, buf);
        EXPECT_FALSE(r.ec) << r.ec.message();
        expect_openai_error(r.msg, 400, "bad_http_request");
    }());
}

// True once the peer has closed `s` (EOF or reset); false while it is open. Does not block.
bool peer_closed(beast::tcp_stream& s) {
    error_code ec;
    s.socket().non_blocking(true, ec);
    char byte = 0;
    s.socket().read_some(net::buffer(&byte, 1), ec);
    return ec && ec != net::error::would_block && ec != net::error::try_again;
}

// Blank lines count toward one read deadline for the request they precede: a blank line now
// and then does not keep a connection open past the read timeout.
TEST_F(ServerTest, BlankLinesDoNotRestartTheReadTimer) {
    Limits limits;
    limits.read_timeout = Duration{300};
    limits.idle_timeout = Duration{300};
    start(limits);
    run([this]() -> awaitable<void> {
        auto s = co_await connect_raw(port_);
        const auto began = Clock::now();
        bool closed = false;
        for (int i = 0; i < 60 && !closed; ++i) {  // 3 s: ten read timeouts
            co_await write_raw(s, i % 2 == 0 ? "\r\n" : "\n");
            co_await sleep_for(Duration{50});
            closed = peer_closed(s);
        }
        EXPECT_TRUE(closed) << "a blank line every 50 ms kept the connection open";
        EXPECT_LT(Clock::now() - began, Duration{1500});
    }());
}

// Lines that end in a bare LF where CRLF is due (chunked framing, trailers, the head) are
// refused at once with 400, not left waiting for a CRLF until the read timeout.
TEST_F(ServerTest, BareLfFramingGets400AtOnce) {
    start();
    run([this]() -> awaitable<void> {
        const std::string chunked =
            "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n";
        for (const std::string& req :
             {chunked + "3\nabc\n0\n\n", chunked + "3\r\nabc\r\n0\r\n\n", chunked + "3;x=y\nabc",
              std::string("GET / HTTP/1.1\nHost: a\n\n")}) {
            auto s = co_await connect_raw(port_);
            beast::flat_buffer buf;
            co_await write_raw(s, req);
            auto r = co_await read_response(s, buf, Duration{1000});  // read timeout: 30 s
            EXPECT_FALSE(r.ec) << r.ec.message() << " for " << req;
            expect_openai_error(r.msg, 400, "bad_http_request");
        }
    }());
}

// RFC 9112 5.2: a field line folded onto the next (obs-fold) is refused with 400, since proxies
// that read it differently disagree on where the request ends; so is whitespace before the
// first field (RFC 9112 2.2).
TEST_F(ServerTest, FoldedHeaderLineGets400) {
    start();
    run([this]() -> awaitable<void> {
        for (std::string_view req : {
                 "POST /f HTTP/1.1\r\nHost: a\r\nX-Foo: a\r\n Transfer-Encoding: chunked\r\n"
                 "Content-Length: 3\r\n\r\nabc",
                 "POST /f HTTP/1.1\r\nHost: a\r\nX-Foo: a\r\n\tb\r\nContent-Length: 3\r\n\r\nabc",
                 "POST /f HTTP/1.1\r\n Host: a\r\nContent-Length: 3\r\n\r\nabc",
             }) {
            auto r = co_await exchange_raw(port_, req);
            EXPECT_FALSE(r.ec) << r.ec.message() << " for " << req;
            expect_openai_error(r.msg, 400, "bad_http_request");
            EXPECT_NE(r.msg.body().find("folding"), std::string::npos) << r.msg.body();
        }
        // a body that holds a LF and a space is not a fold
        auto r = co_await exchange_raw(
            port_, "POST /f HTTP/1.1\r\nHost: a\r\nContent-Length: 4\r\n\r\na\n b");
        EXPECT_FALSE(r.ec) << r.ec.message();
        EXPECT_EQ(r.msg.result_int(), 200u);
        EXPECT_EQ(r.msg.body(), "/f|a\n b");
    }());
}

// RFC 9110 9.3.2: the answer to HEAD has the head a GET would get and no body, so the next
// answer on the connection is read where it starts.
TEST_F(ServerTest, AnswerToHeadHasNoBody) {
    start();
    run([this]() -> awaitable<void> {
        auto s = co_await connect_raw(port_);
        co_await write_raw(s,
                           "HEAD /h HTTP/1.1\r\nHost: a\r\n\r\n"
                           "GET /g HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n");
        const std::string text = co_await read_until_close(s, Duration{2000});
        const std::string head_end = "Content-Length: 3\r\n\r\n";
        const auto first_end = text.find(head_end);
        EXPECT_NE(first_end, std::string::npos) << text;
        if (first_end != std::string::npos) {
            // the second answer starts right after the first head
            EXPECT_EQ(text.compare(first_end + head_end.size(), 9, "HTTP/1.1 "), 0) << text;
        }
        EXPECT_EQ(text.find("/h|"), std::string::npos) << text;
        EXPECT_NE(text.find("/g|"), std::string::npos) << text;
    }());
}

TEST_F(ServerTest, PipelinedRequestsAreAnsweredInOrder) {
    start(Limits{}, [](Exchange& ex) -> awaitable<void> {
        co_await sleep_for(Duration{20});  // the watcher reads the next request meanwhile
        co_await echo_handler(ex);
    });
    run([this]() -> awaitable<void> {
        auto s = co_await connect_raw(port_);
        beast::flat_buffer buf;
        co_await write_raw(s,
                           "GET /1 HTTP/1.1\r\nHost: a\r\n\r\nGET /2 HTTP/1.1\r\nHost: a\r\n\r\n"
                           "POST /3 HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n\r\nzz");
        for (std::string want : {"/1|", "/2|", "/3|zz"}) {
            auto r = co_await read_response(s, buf);
            EXPECT_FALSE(r.ec) << r.ec.message();
            EXPECT_EQ(r.msg.body(), want);
        }
        // The next request arrives while the handler of the previous one runs: the watcher
        // reads it, then the connection parses it from the buffer.
        co_await write_raw(s, "GET /4 HTTP/1.1\r\nHost: a\r\n\r\n");
        co_await sleep_for(Duration{5});
        co_await write_raw(s, "GET /5 HTTP/1.1\r\nHost: a\r\n\r\n");
        for (std::string want : {"/4|", "/5|"}) {
            auto r = co_await read_response(s, buf);
            EXPECT_FALSE(r.ec) << r.ec.message();
            EXPECT_EQ(r.msg.body(), want);
        }
    }());
}

TEST_F(ServerTest, HandlerWithoutAnswerGives500) {
    start(Limits{}, [](Exchange&) -> awaitable<void> { co_return; });
    run([this]() -> awaitable<void> {
        auto r = co_await exchange_raw(port_, "GET / HTTP/1.1\r\nHost: a\r\n\r\n");
        EXPECT_FALSE(r.ec);
        EXPECT_EQ(r.msg.result_int(), 500u);
    }());
}

TEST_F(ServerTest, ThrowingHandlerGives500) {
    start(Limits{}, [](Exchange&) -> awaitable<void> {
        throw std::runtime_error("boom");
        co_return;
    });
    run([this]() -> awaitable<void> {
        auto r = co_await exchange_raw(port_, "GET / HTTP/1.1\r\nHost: a\r\n\r\n");
        EXPECT_FALSE(r.ec);
        EXPECT_EQ(r.msg.result_int(), 500u);
    }());
}

TEST_F(ServerTest, ConnectionsOverLimitGet503) {
    Limits l;
    l.max_connections = 1;
    start(l);
    run([this]() -> awaitable<void> {
        auto first = co_await connect_raw(port_);
        beast::flat_buffer buf1;
        co_await write_raw(first, "GET /a HTTP/1.1\r\nHost: a\r\n\r\n");
        auto r1 = co_await read_response(first, buf1);
        EXPECT_EQ(r1.msg.result_int(), 200u);
        auto second = co_await connect_raw(port_);
        beast::flat_buffer buf2;
        co_await write_raw(second, "GET /b HTTP/1.1\r\nHost: a\r\n\r\n");
        auto r2 = co_await read_response(second, buf2);
        EXPECT_FALSE(r2.ec) << r2.ec.message();
        expect_openai_error(r2.msg, 503, "too_many_connections");
    }());
}

TEST_F(ServerTest, IdleKeepAliveConnectionIsClosedAfterIdleTimeout) {
    Limits l;
    l.idle_timeout = Duration{100};
    start(l);
    run([this]() -> awaitable<void> {
        auto s = co_await connect_raw(port_);
        beast::flat_buffer buf;
        co_await write_raw(s, "GET / HTTP/1.1\r\nHost: a\r\n\r\n");
        auto r = co_await read_response(s, buf);
        EXPECT_EQ(r.msg.result_int(), 200u);
        auto t0 = Clock::now();
        std::string rest = co_await read_until_close(s, Duration{3000});
        EXPECT_TRUE(rest.empty());
        EXPECT_LT(Clock::now() - t0, Duration{2000});
    }());
}

// A client that closes its keep-alive connection after an answer is forgotten at once, not
// after the idle timeout (its socket would otherwise sit in CLOSE-WAIT and count against
// max_connections: enough short-lived clients would lock everyone out).
TEST_F(ServerTest, ClientThatClosesAfterAnAnswerIsForgottenAtOnce) {
    Limits l;
    l.idle_timeout = Duration{60'000};
    start(l);
    run([this]() -> awaitable<void> {
        for (int i = 0; i < 3; ++i) {
            auto s = co_await connect_raw(port_);
            beast::flat_buffer buf;
            co_await write_raw(s, "GET / HTTP/1.1\r\nHost: a\r\n\r\n");
            auto r = co_await read_response(s, buf);
            EXPECT_EQ(r.msg.result_int(), 200u);
            EXPECT_TRUE(r.msg.keep_alive());
            s.close();
        }
        const auto until = Clock::now() + Duration{3000};
        while (server_->active_connections() > 0 && Clock::now() < until) {
            co_await sleep_for(Duration{5});
        }
        EXPECT_EQ(server_->active_connections(), 0u);
    }());
}

// Bodies larger than the socket buffers can hold: the sends that do not go out at once finish
// through the asynchronous path, complete and in order, for whole answers and for streams.
TEST_F(ServerTest, AnswersLargerThanTheSocketBuffersArriveWhole) {
    constexpr std::size_t kChunk = 64 * 1024;
    constexpr std::size_t kChunks = 96;  // 6 MiB: more than loopback's 4 MiB send buffer
    auto pattern = [](std::size_t n, std::size_t salt) {
        std::string out(n, '\0');
        for (std::size_t i = 0; i < n; ++i) {
            out[i] = static_cast<char>('a' + (i * 7 + i / 4093 + salt) % 26);
        }
        return out;
    };
    start({}, [&](Exchange& ex) -> awaitable<void> {
        if (ex.request().target() == "/whole") {
            Response res{http::status::ok, 11};
            res.body() = pattern(kChunk * kChunks, 0);
            co_await ex.respond(std::move(res));
            co_return;
        }
        http::response<http::empty_body> head{http::status::ok, 11};
        if (co_await ex.begin_stream(std::move(head))) {
            co_return;
        }
        for (std::size_t i = 0; i < kChunks; ++i) {
            if (co_await ex.write_chunk(pattern(kChunk, i))) {
                co_return;
            }
        }
        co_await ex.end_stream();
    });
    run([&]() -> awaitable<void> {
        std::string streamed;
        for (std::size_t i = 0; i < kChunks; ++i) {
            streamed += pattern(kChunk, i);
        }
        for (const char* target : {"/whole", "/stream"}) {
            // A small receive buffer: the server's sends overrun it and must wait for the reader.
            tcp::socket sock(co_await net::this_coro::executor);
            sock.open(tcp::v4());
            sock.set_option(net::socket_base::receive_buffer_size(4096));
            auto [cec] = co_await sock.async_connect(
                tcp::endpoint(net::ip::make_address("127.0.0.1"), port_), use_tuple);
            EXPECT_FALSE(cec) << cec.message();
            beast::tcp_stream s(std::move(sock));
            EXPECT_FALSE(co_await write_raw(
                s, std::string("GET ") + target + " HTTP/1.1\r\nHost: a\r\n\r\n"));
            beast::flat_buffer buf;
            http::response_parser<http::string_body> p;
            p.body_limit(64 * 1024 * 1024);
            s.expires_after(Duration{20000});
            auto [ec, n] = co_await http::async_read(s, buf, p, use_tuple);
            (void)n;
            EXPECT_FALSE(ec) << target << ": " << ec.message();
            const std::string& body = p.get().body();
            const std::string expected =
                std::string(target) == "/whole" ? pattern(kChunk * kChunks, 0) : streamed;
            EXPECT_EQ(body.size(), expected.size()) << target;
            EXPECT_TRUE(body == expected) << target << ": bytes differ";
        }
    }());
}

TEST_F(ServerTest, RequestNotCompleteWithinReadTimeoutIsClosed) {
    Limits l;
    l.read_timeout = Duration{150};
    start(l);
    run([this]() -> awaitable<void> {
        // Headers that never end, then a body that never ends: each connection is closed one
        // read timeout after its request began, without an answer and without a handler call.
        const std::string partial[] = {
            "POST /x HTTP/1.1\r\nHost: a\r\n",
            "POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 10\r\n\r\nabc"};
        for (const std::string& bytes : partial) {
            auto s = co_await connect_raw(port_);
            auto t0 = Clock::now();
            EXPECT_FALSE(co_await write_raw(s, bytes));
            std::string rest = co_await read_until_close(s, Duration{3000});
            const auto took = Clock::now() - t0;
            EXPECT_TRUE(rest.empty()) << rest;
            EXPECT_GE(took, Duration{100}) << "closed before the read timeout";
            EXPECT_LT(took, Duration{2000}) << "not closed by the read timeout";
        }
        Timer tick(co_await net::this_coro::executor);
        for (int i = 0; i < 200 && server_->active_connections() != 0; ++i) {
            tick.expires_after(Duration{10});
            co_await tick.async_wait();
        }
        EXPECT_EQ(server_->active_connections(), 0u);
    }());
}

}  // namespace
}  // namespace pdr::server
