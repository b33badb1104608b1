#include "net/server/request_reader.hpp"

#include "config/ascii.hpp"
#include "net/common/fields.hpp"
#include "net/common/http_wire.hpp"
#include "net/common/request_id.hpp"

#include <cstdint>

namespace pdr::server::detail {

namespace {

using RequestParser = http::request_parser<http::string_body>;

constexpr Duration kLingerTime{500};
constexpr std::size_t kLingerBytes = 1 << 20;

bool is_http_error(const error_code& ec) {
    return &ec.category() == &http::make_error_code(http::error::bad_method).category();
}

// True when the request has no Transfer-Encoding or exactly "chunked" (one field). Anything
// else is refused: a coding that does not end in chunked leaves the body's length unknown
// (RFC 9112 6.3: 400 and close, or bytes of the body would be taken for the next request), and
// the router decodes no other coding. (Beast's parser has trimmed the value's whitespace.)
bool plain_transfer_encoding(const Request& req) {
    const std::size_t n = wire::field_count(req, http::field::transfer_encoding);
    return n == 0 ||
           (n == 1 &&
            ascii::iequals(wire::field_value(req, http::field::transfer_encoding), "chunked"));
}

// Drops the CR and LF bytes at the front of what is buffered; returns how many.
std::size_t drop_leading_blank_lines(beast::flat_buffer& buffer) {
    const auto* data = static_cast<const char*>(buffer.data().data());
    std::size_t n = 0;
    while (n < buffer.size() && (data[n] == '\r' || data[n] == '\n')) {
        ++n;
    }
    buffer.consume(n);
    return n;
}

// What the version at the end of the request line in front of `buffer` is, once Beast (which
// takes 1.0 and 1.1 only) refused it: not a well-formed " HTTP/<digit>.<digit>" (400), another
// major version (505), or a later 1.x, served as 1.1 (RFC 9110 6.2): then `minor` points at
// its minor digit.
enum class VersionLine { Malformed, OtherMajor, LaterMinor };

VersionLine classify_version(beast::flat_buffer& buffer, char*& minor) {
    auto* data = static_cast<char*>(buffer.data().data());
    const std::string_view text(data, buffer.size());
    const auto lf = text.find('\n');  // the request line's end (Beast wants it after a CR)
    if (lf == std::string_view::npos || lf < 10 || text[lf - 1] != '\r') {
        return VersionLine::Malformed;
    }
    const auto eol = lf - 1;
    const std::string_view v = text.substr(eol - 9, 9);  // " HTTP/x.y"
    auto digit = [](char c) { return c >= '0' && c <= '9'; };
    if (v.substr(0, 6) != " HTTP/" || !digit(v[6]) || v[7] != '.' || !digit(v[8])) {
        return VersionLine::Malformed;
    }
    if (v[6] != '1') {
        return VersionLine::OtherMajor;
    }
    minor = data + eol - 1;
    return VersionLine::LaterMinor;
}

// A new parser for one request, with the server's header and body limits.
void new_parser(std::optional<RequestParser>& parser, const Limits& limits) {
    parser.emplace();
    parser->header_limit(static_cast<std::uint32_t>(limits.max_header_bytes));
    parser->body_limit(limits.max_body_bytes);
}

// Reads the request's head into `parser`, which it replaces to parse a later HTTP/1.x head
// again as HTTP/1.1.
awaitable<error_code> read_head(Connection& conn, std::optional<RequestParser>& parser) {
    error_code ec;
    bool version_retried = false;
    while (!ec && !parser->is_header_done()) {
        ec = co_await wire::parse_some(conn.stream.socket(), conn.buffer, *parser);
        if (ec == http::error::bad_version && !version_retried) {
            char* minor = nullptr;
            const VersionLine v = classify_version(conn.buffer, minor);
            if (v == VersionLine::OtherMajor) {
                ec = Errc::HttpVersion;
            } else if (v == VersionLine::LaterMinor) {
                *minor = '1';  // parse it again as HTTP/1.1
                version_retried = true;
                ec = {};
                new_parser(parser, conn.server.limits);
            }
        }
    }
    co_return ec;
}

// Grows the request body's share of the server's budget to `total` bytes, waiting for it until
// `deadline`. Meanwhile the read deadline is off: the wait itself ends at it, with the socket
// still open for the 503. Errc::ServerBusy when the share did not come in time; aborted when
// the connection was closed meanwhile (client gone, shutdown).
awaitable<error_code> charge_body(Connection& conn, std::size_t total, Clock::time_point deadline) {
    if (total <= conn.body_charge.bytes()) {
        co_return error_code{};
    }
    conn.read_deadline.expires_never();
    const bool ok = co_await conn.body_charge.grow_to(total, deadline, &conn.body_wait);
    conn.read_deadline.expires_at(deadline);
    if (ok) {
        co_return error_code{};
    }
    if (!conn.stream.socket().is_open()) {
        co_return make_error_code(net::error::operation_aborted);
    }
    co_return make_error_code(Errc::ServerBusy);
}

// A chunked body (length unknown) takes its share in steps of this many bytes ahead of what it
// has decoded.
constexpr std::size_t kChunkedStep = 64 * 1024;

// Reads the body of a request whose head is in `parser`, first taking its share of the body
// budget and answering 100-continue when the client waits for it.
awaitable<error_code> read_body(Connection& conn, RequestParser& parser,
                                Clock::time_point deadline) {
    const Limits& limits = conn.server.limits;
    const auto length = parser.content_length();
    const std::size_t first_share = length ? static_cast<std::size_t>(*length) : kChunkedStep;
    error_code ec = co_await charge_body(conn, first_share, deadline);
    if (ec) {
        co_return ec;
    }
    // RFC 9110 10.1.1: an HTTP/1.0 client's 100-continue is ignored (it cannot expect an
    // interim answer).
    const std::string_view expect = wire::field_value(parser.get(), http::field::expect);
    if (parser.get().version() >= 11 && ascii::iequals(expect, "100-continue")) {
        static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
        auto [wec, wn] = co_await net::async_write(
            conn.stream.socket(), net::buffer(kContinue.data(), kContinue.size()), use_tuple);
        (void)wn;
        ec = wec;
    }
    // The body limit counts decoded bytes; chunk framing (tiny chunks with long extensions)
    // could otherwise cost unbounded reading for a small body.
    const std::size_t max_wire =
        4 * limits.max_body_bytes + limits.max_header_bytes + wire::kMaxUnparsed;
    std::size_t received = 0;
    while (!ec && !parser.is_done()) {
        ec = co_await wire::parse_some(conn.stream.socket(), conn.buffer, parser, &received);
        if (!ec && received > max_wire) {
            ec = http::error::body_limit;
        }
        if (!ec && !length && !parser.is_done()) {
            const std::size_t share = parser.get().body().size() + kChunkedStep;
            ec = co_await charge_body(conn, share, deadline);
        }
    }
    co_return ec;
}

// The answer owed to a client whose request could not be read: what refuse() sends.
struct Refusal {
    Errc errc;
    std::string_view message;
    unsigned version;
    const Request* head;  // see refuse
};

// The answer to a request whose read failed with `ec`; none where the client is owed none (it
// went away or timed out).
std::optional<Refusal> refusal_for(const error_code& ec, const RequestParser& parser) {
    const unsigned version = parser.is_header_done() ? parser.get().version() : 11;
    // A Content-Length over the body limit fails as the head ends, before the parser calls the
    // head done: its fields are all there by then.
    const Request* head =
        parser.is_header_done() || ec == http::error::body_limit ? &parser.get() : nullptr;
    if (ec == http::error::body_limit) {
        return Refusal{Errc::BodyTooLarge, "request body too large", version, head};
    }
    if (ec == Errc::ServerBusy) {
        return Refusal{Errc::ServerBusy,
                       "the server is receiving as many request bodies as it buffers at once; "
                       "retry later",
                       version, head};
    }
    if (ec == http::error::header_limit) {
        return Refusal{Errc::HeadersTooLarge, "request headers too large", version, nullptr};
    }
    if (ec == Errc::HttpVersion) {
        return Refusal{Errc::HttpVersion,
                       "HTTP version not supported: only HTTP/1.0 and HTTP/1.1 are served", 11,
                       nullptr};
    }
    if (ec == http::error::bad_transfer_encoding) {
        return Refusal{Errc::BadHttp, "unsupported Transfer-Encoding: only chunked is accepted",
                       version, head};
    }
    if (ec == http::error::bad_obs_fold) {
        return Refusal{Errc::BadHttp,
                       "obsolete line folding in the request head is not accepted (RFC 9112 5.2)",
                       version, nullptr};
    }
    if (is_http_error(ec) && ec != http::error::end_of_stream &&
        ec != http::error::partial_message) {
        return Refusal{Errc::BadHttp, "malformed HTTP request", version, head};
    }
    return std::nullopt;
}

// After an error answer: stop sending, read and drop what the client still sends for a
// moment, so the close does not reset the connection before the client reads the answer.
awaitable<void> linger_close(Connection& conn) {
    error_code ec;
    conn.stream.socket().shutdown(tcp::socket::shutdown_send, ec);
    conn.stream.expires_after(kLingerTime);
    std::size_t total = 0;
    char sink[4096];
    while (total < kLingerBytes) {
        auto [rec, n] = co_await conn.stream.async_read_some(net::buffer(sink), use_tuple);
        total += n;
        if (rec) {
            break;
        }
    }
    conn.close();
}

// The error answer alone; false when it could not be sent.
awaitable<bool> send_error(Connection& conn, Errc e, std::string_view message, unsigned version,
                           const Request* head) {
    if (conn.server.on_reject) {
        conn.server.on_reject(e);
    }
    Response res = make_error_response(e, message, version);
    res.set(kRequestIdHeader, head ? request_id_of(*head) : make_uuid_v4());
    conn.stream.expires_after(conn.server.limits.write_timeout);
    auto [ec, n] = co_await http::async_write(conn.stream, res, use_tuple);
    (void)n;
    co_return !ec;
}

}  // namespace

BlankLines skip_blank_lines(Connection& conn, Preamble& pre) {
    const std::size_t n = drop_leading_blank_lines(conn.buffer);
    if (n > 0 && !pre.deadline) {
        pre.deadline = Clock::now() + conn.server.limits.read_timeout;
    }
    pre.blank += n;
    if (conn.buffer.size() > 0) {
        return BlankLines::None;
    }
    return pre.blank > conn.server.limits.max_header_bytes ? BlankLines::TooMany : BlankLines::Only;
}

awaitable<std::optional<Request>> read_request(Connection& conn, Clock::time_point deadline) {
    conn.phase = Connection::Phase::Reading;
    std::optional<RequestParser> parser;
    new_parser(parser, conn.server.limits);
    conn.read_deadline.expires_at(deadline);  // the whole request
    error_code ec = co_await read_head(conn, parser);
    if (!ec && !plain_transfer_encoding(parser->get())) {
        ec = http::error::bad_transfer_encoding;
    }
    if (!ec && !parser->is_done()) {
        ec = co_await read_body(conn, *parser, deadline);
    }
    conn.read_deadline.expires_never();
    if (ec) {
        if (const std::optional<Refusal> r = refusal_for(ec, *parser)) {
            co_await refuse(conn, r->errc, r->message, r->version, r->head);
        }
        co_return std::nullopt;
    }
    co_return parser->release();
}

awaitable<void> refuse(Connection& conn, Errc e, std::string_view message, unsigned version,
                       const Request* head) {
    // Through a variable: with `if (co_await send_error(...))` as this coroutine's whole body,
    // GCC 12 (-O2) builds code that crashes once the answer is sent.
    const bool sent = co_await send_error(conn, e, message, version, head);
    if (sent) {
        co_await linger_close(conn);
    }
}

}  // namespace pdr::server::detail
