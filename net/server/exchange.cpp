#include "net/server/exchange.hpp"

#include "net/common/http_wire.hpp"
#include "net/common/request_id.hpp"
#include "net/common/sse_cut.hpp"

#include <charconv>

namespace pdr::server::detail {

namespace {

// "<hex size>\r\n", the size line of a chunk of `size` bytes (the chunk framing Beast's
// make_chunk writes), put in `out`; returns its length.
std::size_t chunk_size_line(char (&out)[24], std::size_t size) noexcept {
    auto [end, ec] = std::to_chars(out, out + 16, size, 16);
    (void)ec;
    *end++ = '\r';
    *end++ = '\n';
    return static_cast<std::size_t>(end - out);
}

}  // namespace

std::string ExchangeImpl::remote_address() const {
    auto addr = conn_.remote.address();
    std::string s = addr.is_v6() ? "[" + addr.to_string() + "]" : addr.to_string();
    return s + ":" + std::to_string(conn_.remote.port());
}

awaitable<error_code> ExchangeImpl::respond(Response res) {
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
        if (auto rest =
                wire::send_or_rest(conn_.stream, buffers, conn_.server.limits.write_timeout, ec)) {
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

awaitable<error_code> ExchangeImpl::begin_stream(http::response<http::empty_body> head) {
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

awaitable<error_code> ExchangeImpl::begin_stream_held(http::response<http::empty_body> head) {
    error_code ec = start_stream(head);
    head_held_ = !ec;  // sent with the first chunk or the end of the body
    co_return ec;
}

awaitable<error_code> ExchangeImpl::write_chunk(std::string_view data) {
    error_code ec;
    if (auto rest = write_chunk_or_rest(data, ec)) {
        ec = co_await std::move(*rest);
    }
    co_return ec;
}

std::optional<awaitable<error_code>> ExchangeImpl::write_chunk_or_rest(std::string_view data,
                                                                       error_code& ec) {
    return send_chunk_or_rest(data, false, ec);
}

std::optional<awaitable<error_code>> ExchangeImpl::write_last_chunk_or_rest(std::string_view data,
                                                                            error_code& ec) {
    return send_chunk_or_rest(data, true, ec);
}

awaitable<error_code> ExchangeImpl::end_stream() {
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

void ExchangeImpl::abort() {
    if (!aborted_) {
        aborted_ = true;
        conn_.close();
    }
}

ShutdownCut ExchangeImpl::cut_for_shutdown() {
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
            char size_line[24];
            text.append(size_line, chunk_size_line(size_line, event.size()))
                .append(event)
                .append("\r\n");
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

error_code ExchangeImpl::start_stream(http::response<http::empty_body>& head) {
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

std::optional<awaitable<error_code>> ExchangeImpl::send_chunk_or_rest(std::string_view data,
                                                                      bool last, error_code& ec) {
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
    // "<hex size>\r\n" + data + "\r\n" (HTTP/1.0: the data alone).
    size_line_len_ = !plain_ && !data.empty() ? chunk_size_line(size_line_, data.size()) : 0;
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

std::array<net::const_buffer, 5> ExchangeImpl::chunk_buffers(std::string_view data) const {
    static constexpr std::string_view kLastChunk = "0\r\n\r\n";
    const bool framed = !plain_ && !data.empty();
    return {net::buffer(conn_.head_buf.data(), head_held_ ? conn_.head_buf.size() : 0),
            net::buffer(size_line_, size_line_len_), net::buffer(data.data(), data.size()),
            net::buffer("\r\n", framed ? 2 : 0),
            net::buffer(kLastChunk.data(), last_ && !plain_ ? kLastChunk.size() : 0)};
}

awaitable<error_code> ExchangeImpl::send_chunk_rest(std::string_view data, std::size_t sent) {
    const auto chunk = chunk_buffers(data);
    writing_ = true;
    error_code ec =
        co_await wire::send_rest(conn_.stream, chunk, sent, conn_.server.limits.write_timeout);
    writing_ = false;
    sent_all(ec);
    co_return ec;
}

void ExchangeImpl::sent_all(const error_code& ec) {
    if (ec) {
        failed_write(ec);
        return;
    }
    head_held_ = false;
    if (last_) {
        complete_ = true;
    }
}

void ExchangeImpl::failed_write(const error_code&) {
    // The socket is unusable: close it so the watcher wakes and the handler is cancelled.
    conn_.close();
    mark_gone();
}

Response make_error_response(Errc e, std::string_view message, unsigned version) {
    Response res{error_info(e).status, version == 10 ? 10u : 11u};
    res.set(http::field::content_type, "application/json");
    res.body() = openai_error_body(e, message);
    if (e == Errc::TooManyConnections || e == Errc::ServerBusy) {
        res.set(http::field::retry_after, "1");
    }
    res.keep_alive(false);
    res.prepare_payload();
    return res;
}

}  // namespace pdr::server::detail
