#include "net/server/connection.hpp"

#include "config/ascii.hpp"
#include "net/common/http_wire.hpp"
#include "net/common/log.hpp"
#include "net/common/request_id.hpp"
#include "net/common/sse_cut.hpp"

#include <array>
#include <charconv>
#include <optional>

namespace pdr::server::detail {

namespace {

constexpr std::size_t kMaxPipelinedBytes = 64 * 1024;  // kept while the handler runs
constexpr std::size_t kWatchReadSize = 4096;
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
    auto [first, last] = req.equal_range(http::field::transfer_encoding);
    return first == last || (std::next(first) == last && ascii::iequals(first->value(), "chunked"));
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

}  // namespace

class ExchangeImpl final : public Exchange {
public:
    ExchangeImpl(Connection& c, Request req) : conn_(c), req_(std::move(req)) {}

    const Request& request() const override { return req_; }
    std::string remote_address() const override {
        auto addr = conn_.remote.address();
        std::string s = addr.is_v6() ? "[" + addr.to_string() + "]" : addr.to_string();
        return s + ":" + std::to_string(conn_.remote.port());
    }

    awaitable<error_code> respond(Response res) override {
        if (responded_) {
            co_return net::error::already_started;
        }
        if (gone_ || aborted_) {
            co_return net::error::not_connected;
        }
        responded_ = true;
        res.version(req_.version());
        keep_alive_ = req_.keep_alive() && res.keep_alive() && !conn_.server.draining;
        res.keep_alive(keep_alive_);
        res.prepare_payload();
        error_code ec;
        if (req_.method() == http::verb::head && !res.chunked()) {
            // RFC 9110 9.3.2: the head of the answer a GET would get, never a body (its
            // Content-Length stays: it says what a GET would carry).
            std::array<net::const_buffer, 1> head{
                net::buffer(wire::head_text(conn_.head_buf, res.base()))};
            if (auto rest =
                    wire::send_or_rest(conn_.stream, head, conn_.server.limits.write_timeout, ec)) {
                ec = co_await std::move(*rest);
            }
        } else if (!res.chunked()) {
            // Head and body in one gather write (the bytes Beast's serializer would send).
            auto buffers = wire::message_buffers(conn_.head_buf, res);
            if (auto rest = wire::send_or_rest(conn_.stream, buffers,
                                               conn_.server.limits.write_timeout, ec)) {
                ec = co_await std::move(*rest);
            }
        } else {
            conn_.stream.expires_after(conn_.server.limits.write_timeout);
            auto [wec, n] = co_await http::async_write(conn_.stream, res, use_tuple);
            (void)n;
            ec = wec;
        }
        if (ec) {
            failed_write(ec);
        } else {
            complete_ = true;
        }
        co_return ec;
    }

    awaitable<error_code> begin_stream(http::response<http::empty_body> head) override {
        if (error_code ec = start_stream(head)) {
            co_return ec;
        }
        const auto buffer = net::buffer(conn_.head_buf);
        error_code ec;
        if (auto rest =
                wire::send_or_rest(conn_.stream, buffer, conn_.server.limits.write_timeout, ec)) {
            writing_ = true;  // the shutdown cut must not write into the middle of it
            ec = co_await std::move(*rest);
            writing_ = false;
        }
        if (ec) {
            failed_write(ec);
        }
        co_return ec;
    }

    awaitable<error_code> begin_stream_held(http::response<http::empty_body> head) override {
        error_code ec = start_stream(head);
        head_held_ = !ec;  // sent with the first chunk or the end of the body
        co_return ec;
    }

    awaitable<error_code> write_chunk(std::string_view data) override {
        error_code ec;
        if (auto rest = write_chunk_or_rest(data, ec)) {
            ec = co_await std::move(*rest);
        }
        co_return ec;
    }

    std::optional<awaitable<error_code>> write_chunk_or_rest(std::string_view data,
                                                             error_code& ec) override {
        return send_chunk_or_rest(data, false, ec);
    }

    std::optional<awaitable<error_code>> write_last_chunk_or_rest(std::string_view data,
                                                                  error_code& ec) override {
        return send_chunk_or_rest(data, true, ec);
    }

    awaitable<error_code> end_stream() override {
        if (!streaming_ || complete_) {
            co_return net::error::operation_not_supported;
        }
        if (gone_ || aborted_) {
            co_return net::error::not_connected;
        }
        if (plain_ && !head_held_) {
            complete_ = true;  // the close that follows ends the body
            co_return error_code{};
        }
        error_code ec;
        if (auto rest = send_chunk_or_rest({}, true, ec)) {
            ec = co_await std::move(*rest);
        }
        co_return ec;
    }

    void set_request_id(std::string id) override { request_id_ = std::move(id); }

    void abort() override {
        if (!aborted_) {
            aborted_ = true;
            conn_.close();
        }
    }

    bool responded() const override { return responded_; }
    bool client_gone() const override { return gone_; }

    void on_client_gone(std::function<void()> fn) override {
        if (!fn) {
            return;
        }
        if (gone_) {
            fn();
            return;
        }
        callbacks_.push_back(std::move(fn));
    }

    // The client went away (EOF/error seen by the watcher, or a failed write).
    void mark_gone() {
        if (gone_) {
            return;
        }
        gone_ = true;
        auto callbacks = std::move(callbacks_);
        callbacks_.clear();
        for (auto& fn : callbacks) {
            try {
                fn();
            } catch (const std::exception& e) {
                PDR_ERROR("server", std::string("on_client_gone callback threw: ") + e.what());
            }
        }
    }

    bool reusable() const { return complete_ && keep_alive_ && !gone_ && !aborted_; }

    // The shutdown grace is over with this exchange still running: the client is told (a 503
    // when nothing was sent yet; an SSE error event when a stream is under way and no write is
    // half done), best effort without waiting; the connection is closed and the handler
    // cancelled (its upstream legs with it).
    ShutdownCut cut_for_shutdown() {
        if (gone_ || aborted_ || complete_) {
            return ShutdownCut::None;
        }
        std::string text;
        if (!responded_) {
            Response res = make_error_response(
                Errc::ShuttingDown,
                "the " + conn_.server.limits.name + " shut down before the answer was ready",
                req_.version());
            if (!request_id_.empty()) {
                res.set(kRequestIdHeader, request_id_);
            }
            if (req_.method() == http::verb::head) {
                res.body().clear();
            }
            wire::head_text(text, res.base());
            text += res.body();
        } else if (streaming_ && !writing_) {
            std::string event =
                openai_error_event(Errc::ShuttingDown, "the " + conn_.server.limits.name +
                                                           " shut down before the stream ended");
            if (!at_event_end_) {
                event.insert(0, "\n\n");  // end the event passed on unfinished first
            }
            if (head_held_) {
                text = conn_.head_buf;  // nothing sent yet: the head goes first
            }
            if (!plain_) {
                char size[16];
                auto [end, fec] = std::to_chars(size, size + sizeof size, event.size(), 16);
                (void)fec;
                text.append(size, end).append("\r\n").append(event).append("\r\n");
            } else {
                text.append(event);
            }
        }
        bool told = false;
        if (!text.empty()) {
            std::size_t sent = 0;
            error_code ec;
            told = wire::send_now(conn_.stream.socket(), net::buffer(text), sent, ec) && !ec;
        }
        abort();
        mark_gone();
        if (conn_.watch->cancel != nullptr) {
            // The watch read may be stopped (pipelined bytes over the limit): cancel directly.
            conn_.watch->cancel->emit(net::cancellation_type::terminal);
        }
        return told ? ShutdownCut::Told : ShutdownCut::Closed;
    }

private:
    // Checks and marks the start of a stream and puts its head's bytes in conn_.head_buf.
    error_code start_stream(http::response<http::empty_body>& head) {
        if (responded_) {
            return net::error::already_started;
        }
        if (gone_ || aborted_) {
            return net::error::not_connected;
        }
        responded_ = true;
        streaming_ = true;
        if (req_.version() == 10 || head.version() == 10) {
            // HTTP/1.0 has no chunked encoding: the body is the bytes until the close. (A
            // handler may ask for that with an HTTP/1.0 head; pdsim does, to emulate such
            // an engine.)
            plain_ = true;
            head.version(10);
            keep_alive_ = false;
            head.keep_alive(false);
        } else {
            head.version(11);
            keep_alive_ = req_.keep_alive() && head.keep_alive() && !conn_.server.draining;
            head.keep_alive(keep_alive_);
            head.chunked(true);
        }
        std::string& text = conn_.head_buf;
        text.clear();
        wire::append_head(text, head.base());
        return {};
    }

    // One gather write: the held head (if any), the chunk of `data` (if not empty) and, with
    // `last`, the end of the body. Sent now when the socket takes it all; otherwise returns
    // what sends the rest.
    std::optional<awaitable<error_code>> send_chunk_or_rest(std::string_view data, bool last,
                                                            error_code& ec) {
        ec = {};
        if (!streaming_ || complete_) {
            ec = net::error::operation_not_supported;
            return std::nullopt;
        }
        if (gone_ || aborted_) {
            ec = net::error::not_connected;
            return std::nullopt;
        }
        if (data.empty() && !last && !head_held_) {
            return std::nullopt;  // an empty chunk would end the body
        }
        // "<hex size>\r\n" + data + "\r\n": the chunk framing Beast's make_chunk writes
        // (HTTP/1.0: the data alone).
        size_line_len_ = 0;
        if (!plain_ && !data.empty()) {
            auto [end, fec] = std::to_chars(size_line_, size_line_ + 16, data.size(), 16);
            (void)fec;
            *end++ = '\r';
            *end++ = '\n';
            size_line_len_ = static_cast<std::size_t>(end - size_line_);
        }
        if (!data.empty()) {
            at_event_end_ = ends_an_sse_event(data);
        }
        last_ = last;
        std::size_t sent = 0;
        if (wire::send_now(conn_.stream.socket(), chunk_buffers(data), sent, ec)) {
            sent_all(ec);
            return std::nullopt;
        }
        return send_chunk_rest(data, sent);
    }

    std::array<net::const_buffer, 5> chunk_buffers(std::string_view data) const {
        static constexpr std::string_view kLastChunk = "0\r\n\r\n";
        const bool framed = !plain_ && !data.empty();
        return {net::buffer(conn_.head_buf.data(), head_held_ ? conn_.head_buf.size() : 0),
                net::buffer(size_line_, size_line_len_), net::buffer(data.data(), data.size()),
                net::buffer("\r\n", framed ? 2 : 0),
                net::buffer(kLastChunk.data(), last_ && !plain_ ? kLastChunk.size() : 0)};
    }

    // The part of a chunk that did not go out at once (the socket's buffer was full).
    awaitable<error_code> send_chunk_rest(std::string_view data, std::size_t sent) {
        const auto chunk = chunk_buffers(data);
        writing_ = true;
        error_code ec =
            co_await wire::send_rest(conn_.stream, chunk, sent, conn_.server.limits.write_timeout);
        writing_ = false;
        sent_all(ec);
        co_return ec;
    }

    void sent_all(const error_code& ec) {
        if (ec) {
            failed_write(ec);
            return;
        }
        head_held_ = false;
        if (last_) {
            complete_ = true;
        }
    }

    void failed_write(const error_code&) {
        // The socket is unusable: close it so the watcher wakes and the handler is cancelled.
        conn_.close();
        mark_gone();
    }

    Connection& conn_;
    Request req_;
    bool responded_ = false;
    bool streaming_ = false;
    bool plain_ = false;  // a stream to an HTTP/1.0 client: no chunk framing, ends at the close
    bool complete_ = false;
    bool keep_alive_ = false;
    bool gone_ = false;
    bool aborted_ = false;
    bool writing_ = false;      // a chunk is half sent (its rest is being written)
    bool head_held_ = false;    // begin_stream_held: the head waits for the first write
    bool last_ = false;         // the write under way ends the body
    bool at_event_end_ = true;  // the last chunk ended with a blank line (an SSE event's end)
    std::string request_id_;    // for answers the server makes itself (see set_request_id)
    std::vector<std::function<void()>> callbacks_;
    char size_line_[24];  // the current chunk's size line (lives until its rest is sent)
    std::size_t size_line_len_ = 0;
};

namespace {

awaitable<void> run_handler(ServerState& server, ExchangeImpl& ex) {
    try {
        co_await server.handler(ex);
    } catch (const boost::system::system_error& e) {
        if (e.code() != net::error::operation_aborted) {
            PDR_ERROR("server", std::string("handler threw: ") + e.what());
        }
    } catch (const std::exception& e) {
        PDR_ERROR("server", std::string("handler threw: ") + e.what());
    }
}

// Reads from the client while the handler runs: EOF or an error means the client is gone (the
// handler is then cancelled through the connection coroutine's cancellation signal). Bytes
// that arrive (a pipelined request) stay in the connection buffer for the next parse. A plain
// completion handler, not a coroutine: no frame, no parallel group per request. The read may
// still be pending when the handler ends; wait_for_request then waits for it.
void watch_client(const std::shared_ptr<Watch>& w, tcp::socket& sock) {
    if (w->pending || w->buffer->size() >= kMaxPipelinedBytes) {
        return;  // over the limit: stop reading until the handler is done
    }
    w->pending = true;
    sock.async_read_some(w->buffer->prepare(kWatchReadSize),
                         [w, &sock](const error_code& ec, std::size_t n) {
                             if (!w->alive) {
                                 return;  // the Connection (and `sock`) are gone
                             }
                             w->pending = false;
                             if (w->stopping) {
                                 w->stopping = false;  // cancelled by wait_for_request
                                 w->buffer->commit(n);
                                 return;
                             }
                             w->ec = ec;
                             w->buffer->commit(n);
                             if (w->exchange == nullptr) {
                                 // between requests: wake wait_for_request, which takes it
                                 w->done->cancel();
                                 return;
                             }
                             if (ec) {
                                 w->exchange->mark_gone();
                                 w->cancel->emit(net::cancellation_type::terminal);
                                 return;
                             }
                             watch_client(w, sock);
                         });
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

// `head`: the request's head when it was read (its X-Request-Id, if sane, is answered back, as
// for every other answer); else a fresh id.
awaitable<bool> send_error(Connection& conn, Errc e, std::string_view message, unsigned version,
                           const Request* head = nullptr) {
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

// Waits (idle timeout) for the first bytes of the next request. False: close quietly.
awaitable<bool> wait_for_request(Connection& conn, Duration timeout) {
    Watch& w = *conn.watch;
    if (conn.buffer.size() > 0) {
        if (w.pending) {
            // A pipelined request arrived during the handler and the watch read is still
            // queued: stop it before parsing from the buffer (its completion runs first).
            w.stopping = true;
            error_code ec;
            conn.stream.socket().cancel(ec);
            co_await net::post(conn.stream.get_executor(), net::use_awaitable);
        }
        co_return w.pending == false;
    }
    conn.phase = Connection::Phase::Idle;
    if (conn.server.draining || w.ec) {
        co_return false;
    }
    conn.read_deadline.expires_after(timeout);
    if (w.pending) {
        // The watch read is still queued: let it be the read of the next request (no new read,
        // no syscall); its completion stores its bytes or its error, then wakes this wait. The
        // idle deadline closes the socket, which completes the read.
        conn.watch_done.expires_at(Clock::time_point::max());
        co_await conn.watch_done.async_wait();
        co_return !w.pending && !w.ec && conn.buffer.size() > 0;
    }
    auto space = conn.buffer.prepare(conn.server.limits.max_header_bytes + 1024);
    auto [ec, n] = co_await conn.stream.socket().async_read_some(space, use_tuple);
    conn.buffer.commit(n);
    co_return !ec && n > 0;
}

}  // namespace

Connection::Connection(ServerState& s, tcp::socket sock)
    : server(s),
      stream(std::move(sock)),
      read_deadline(s.executor, [this] { close(); }),
      watch_done(s.executor) {
    watch->buffer = &buffer;
    watch->done = &watch_done;
    error_code ec;
    remote = stream.socket().remote_endpoint(ec);
    stream.socket().set_option(tcp::no_delay(true), ec);
}

Connection::~Connection() {
    watch->alive = false;
}

ShutdownCut cut_for_shutdown(Connection& conn) {
    if (conn.phase != Connection::Phase::Busy || conn.watch->exchange == nullptr) {
        return ShutdownCut::None;
    }
    return conn.watch->exchange->cut_for_shutdown();
}

void Connection::close() noexcept {
    error_code ec;
    stream.socket().shutdown(tcp::socket::shutdown_both, ec);
    stream.close();
}

Response make_error_response(Errc e, std::string_view message, unsigned version) {
    Response res{error_info(e).status, version == 10 ? 10u : 11u};
    res.set(http::field::content_type, "application/json");
    res.body() = openai_error_body(e, message);
    if (e == Errc::TooManyConnections) {
        res.set(http::field::retry_after, "1");
    }
    res.keep_alive(false);
    res.prepare_payload();
    return res;
}

awaitable<void> run_connection(std::shared_ptr<ServerState> state, tcp::socket sock,
                               net::cancellation_signal& cancel) {
    Connection conn(*state, std::move(sock));
    state->connections.push_front(&conn);
    conn.pos = state->connections.begin();
    struct Guard {
        ServerState& s;
        Connection& c;
        ~Guard() {
            s.connections.erase(c.pos);
            s.connection_ended();
        }
    } guard{*state, conn};

    const Limits& limits = state->limits;
    bool first = true;
    std::size_t blank = 0;  // blank-line bytes since the last request
    for (;;) {
        if (!co_await wait_for_request(conn, first ? limits.read_timeout : limits.idle_timeout)) {
            break;
        }
        // RFC 9112 2.2: empty lines before a request line are ignored (some clients send a CRLF
        // after a POST body); the connection stays idle meanwhile (a drain closes it at once).
        // More blank bytes than the header limit are a malformed request.
        blank += drop_leading_blank_lines(conn.buffer);
        if (conn.buffer.size() == 0) {
            if (blank > limits.max_header_bytes) {
                if (co_await send_error(conn, Errc::BadHttp, "malformed HTTP request", 11)) {
                    co_await linger_close(conn);
                }
                break;
            }
            continue;
        }
        blank = 0;
        first = false;
        conn.phase = Connection::Phase::Reading;
        std::optional<http::request_parser<http::string_body>> parser;
        parser.emplace();
        parser->header_limit(static_cast<std::uint32_t>(limits.max_header_bytes));
        parser->body_limit(limits.max_body_bytes);
        conn.read_deadline.expires_after(limits.read_timeout);  // the whole request
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
                    parser.emplace();
                    parser->header_limit(static_cast<std::uint32_t>(limits.max_header_bytes));
                    parser->body_limit(limits.max_body_bytes);
                }
            }
        }
        if (!ec && !plain_transfer_encoding(parser->get())) {
            ec = http::error::bad_transfer_encoding;
        }
        if (!ec && !parser->is_done()) {
            // RFC 9110 10.1.1: an HTTP/1.0 client's 100-continue is ignored (it cannot expect
            // an interim answer).
            auto expect = parser->get()[http::field::expect];
            if (parser->get().version() >= 11 && ascii::iequals(expect, "100-continue")) {
                static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
                auto [wec, wn] = co_await net::async_write(
                    conn.stream.socket(), net::buffer(kContinue.data(), kContinue.size()),
                    use_tuple);
                (void)wn;
                ec = wec;
            }
            // The body limit counts decoded bytes; chunk framing (tiny chunks with long
            // extensions) could otherwise cost unbounded reading for a small body.
            const std::size_t max_wire =
                4 * limits.max_body_bytes + limits.max_header_bytes + wire::kMaxUnparsed;
            std::size_t received = 0;
            while (!ec && !parser->is_done()) {
                ec = co_await wire::parse_some(conn.stream.socket(), conn.buffer, *parser,
                                               &received);
                if (!ec && received > max_wire) {
                    ec = http::error::body_limit;
                }
            }
        }
        conn.read_deadline.expires_never();
        if (ec) {
            const unsigned version = parser->is_header_done() ? parser->get().version() : 11;
            // A Content-Length over the body limit fails as the head ends, before the parser
            // calls the head done: its fields are all there by then.
            const Request* head = parser->is_header_done() || ec == http::error::body_limit
                                      ? &parser->get()
                                      : nullptr;
            if (ec == http::error::body_limit) {
                if (co_await send_error(conn, Errc::BodyTooLarge, "request body too large", version,
                                        head)) {
                    co_await linger_close(conn);
                }
            } else if (ec == http::error::header_limit) {
                if (co_await send_error(conn, Errc::HeadersTooLarge, "request headers too large",
                                        version)) {
                    co_await linger_close(conn);
                }
            } else if (ec == Errc::HttpVersion) {
                if (co_await send_error(conn, Errc::HttpVersion,
                                        "HTTP version not supported: only HTTP/1.0 and HTTP/1.1 "
                                        "are served",
                                        11)) {
                    co_await linger_close(conn);
                }
            } else if (ec == http::error::bad_transfer_encoding) {
                if (co_await send_error(conn, Errc::BadHttp,
                                        "unsupported Transfer-Encoding: only chunked is accepted",
                                        version, head)) {
                    co_await linger_close(conn);
                }
            } else if (is_http_error(ec) && ec != http::error::end_of_stream &&
                       ec != http::error::partial_message) {
                if (co_await send_error(conn, Errc::BadHttp, "malformed HTTP request", version,
                                        head)) {
                    co_await linger_close(conn);
                }
            }
            break;
        }

        conn.phase = Connection::Phase::Busy;
        ExchangeImpl ex(conn, parser->release());
        parser.reset();
        conn.watch->exchange = &ex;
        conn.watch->cancel = &cancel;
        watch_client(conn.watch, conn.stream.socket());
        co_await run_handler(*state, ex);
        conn.watch->exchange = nullptr;
        if (!ex.responded() && !ex.client_gone()) {
            Response res = make_error_response(Errc::Internal, "handler sent no response",
                                               ex.request().version());
            res.keep_alive(ex.request().keep_alive());
            co_await ex.respond(std::move(res));
        }
        if (!ex.reusable()) {
            break;
        }
    }
    conn.close();
}

awaitable<void> reject_connection(std::shared_ptr<ServerState> state, tcp::socket sock) {
    Connection conn(*state, std::move(sock));
    conn.pos = state->connections.end();
    ++state->pending_rejects;
    if (co_await send_error(conn, Errc::TooManyConnections, "too many client connections", 11)) {
        co_await linger_close(conn);
    }
    conn.close();
    --state->pending_rejects;
}

}  // namespace pdr::server::detail
