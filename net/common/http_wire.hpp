#pragma once
// Message heads serialized into one string, byte for byte as Beast's serializer writes them, so
// that a whole message goes out as one gather write of two buffers (head, body) instead of going
// through Beast's serializer and its many small buffers (one per header field).
#include "net/common/io.hpp"

#include <algorithm>
#include <array>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

namespace pdr::wire {

namespace detail {

inline void append_version(std::string& out, unsigned version) {
    out.append("HTTP/");
    out.push_back(static_cast<char>('0' + version / 10));
    out.push_back('.');
    out.push_back(static_cast<char>('0' + version % 10));
}

template <class Fields>
void append_fields(std::string& out, const Fields& fields) {
    for (const auto& f : fields) {
        out.append(f.name_string()).append(": ").append(f.value()).append("\r\n");
    }
    out.append("\r\n");
}

}  // namespace detail

// "<method> <target> HTTP/x.y\r\n" + fields + "\r\n", appended to `out`.
template <class Fields>
void append_head(std::string& out, const http::header<true, Fields>& h) {
    out.append(h.method_string());
    if (!h.target().empty()) {
        out.push_back(' ');
        out.append(h.target());
    }
    out.push_back(' ');
    detail::append_version(out, h.version());
    out.append("\r\n");
    detail::append_fields(out, h);
}

// "HTTP/x.y ### <reason>\r\n" + fields + "\r\n", appended to `out`.
template <class Fields>
void append_head(std::string& out, const http::header<false, Fields>& h) {
    const unsigned code = h.result_int();
    detail::append_version(out, h.version());
    out.push_back(' ');
    out.push_back(static_cast<char>('0' + code / 100));
    out.push_back(static_cast<char>('0' + (code / 10) % 10));
    out.push_back(static_cast<char>('0' + code % 10));
    out.push_back(' ');
    beast::string_view reason = h.reason();
    if (reason.empty()) {
        reason = http::obsolete_reason(static_cast<http::status>(code));
    }
    out.append(reason.data(), reason.size());
    out.append("\r\n");
    detail::append_fields(out, h);
}

// The head alone (for an answer to HEAD), in `out` (cleared first); returns `out`.
template <bool IsRequest, class Fields>
const std::string& head_text(std::string& out, const http::header<IsRequest, Fields>& h) {
    out.clear();
    append_head(out, h);
    return out;
}

// A string_body message as written by http::async_write, when it is not chunked: the caller
// checks `msg.chunked()` and uses Beast's serializer for chunked messages. `head` is scratch
// space (kept by the caller to reuse its capacity) and must live until the write completes.
template <bool IsRequest, class Fields>
std::array<net::const_buffer, 2> message_buffers(
    std::string& head, const http::message<IsRequest, http::string_body, Fields>& msg) {
    head.clear();
    append_head(head, msg.base());
    return {net::buffer(head), net::buffer(msg.body())};
}

inline constexpr std::size_t kReadSize = 16 * 1024;  // bytes asked of the socket per read
// After the header, the most bytes the parser may leave unparsed: it takes body bytes as they
// come, so only a chunk-size line (with its extensions) or a trailer block is held whole, and
// neither is bounded by the header or body limit. Beyond this the message is refused
// (buffer_overflow) instead of growing the buffer without end. Below Beast's largest field
// value (64 KiB - 3), which it would throw on.
inline constexpr std::size_t kMaxUnparsed = 32 * 1024;

// True when `text` holds a LF that does not follow a CR. Beast's parser ends the lines of a head
// and of chunked framing at CRLF only: on a line that ends in a bare LF it waits for more bytes,
// which cannot help (the client would get no answer until the read timeout).
inline bool has_bare_lf(std::string_view text) {
    for (auto i = text.find('\n'); i != std::string_view::npos; i = text.find('\n', i + 1)) {
        if (i == 0 || text[i - 1] != '\r') {
            return true;
        }
    }
    return false;
}

// True when a line of the head at the front of `text` starts with SP or HTAB: an obsolete
// folded field line (RFC 9112 5.2), or whitespace before the first field (2.2). Beast unfolds
// the former into the field before it; a server must not, since proxies that read it
// differently disagree on where the request ends. Looks no further than the head's end.
inline bool has_folded_line(std::string_view text) {
    const auto end = std::min(text.find("\r\n\r\n"), text.size());
    for (auto i = text.find('\n'); i < end; i = text.find('\n', i + 1)) {
        if (i + 1 < text.size() && (text[i + 1] == ' ' || text[i + 1] == '\t')) {
            return true;
        }
    }
    return false;
}

// The I/O-free half of a read: feeds the bytes buffered in `in` to the parser. False when the
// parser needs more bytes (read from the socket into `in`, then call again); true with the
// parser's verdict in `ec` (need_buffer: a buffer_body is full). Body bytes a parser already
// took stay in its body buffer across calls.
template <class Parser>
bool parse_buffered(beast::flat_buffer& in, Parser& parser, error_code& ec) {
    ec = {};
    if (in.size() == 0) {
        return false;
    }
    // Beast takes a head whole, once its end is buffered: check it before it is taken.
    if constexpr (Parser::is_request::value) {
        if (!parser.is_header_done() &&
            has_folded_line({static_cast<const char*>(in.data().data()), in.size()})) {
            ec = http::error::bad_obs_fold;
            return true;
        }
    }
    std::size_t used = 0;
    try {
        used = parser.put(in.data(), ec);
    } catch (const std::length_error&) {
        ec = http::error::header_limit;  // a field Beast cannot store (e.g. a huge value)
        return true;
    }
    in.consume(used);
    if (ec == http::error::need_more) {
        ec = {};
        if (parser.is_header_done() && in.size() >= kMaxUnparsed) {
            ec = http::error::buffer_overflow;
            return true;
        }
        // What the parser left is a head, or chunked framing (a chunk-size line, trailers),
        // never body bytes: a bare LF in it is a line Beast would never end (RFC 9112 7.1).
        if (has_bare_lf({static_cast<const char*>(in.data().data()), in.size()})) {
            ec = http::error::bad_line_ending;
            return true;
        }
        return false;
    }
    return true;
}

// The verdict when a socket read failed with `read_ec`: EOF ends a message that has started
// (put_eof) and is end_of_stream before its first byte; other errors are returned as they are.
template <class Parser>
error_code read_failed(Parser& parser, const error_code& read_ec) {
    if (read_ec != net::error::eof) {
        return read_ec;
    }
    if (!parser.got_some()) {
        return http::error::end_of_stream;
    }
    error_code ec;
    parser.put_eof(ec);
    return ec;
}

// Beast's http::async_read_some without its composed operation (which costs more than the
// parsing): parses what is buffered and reads from `sock` only when the parser needs more.
// Returns the parser's verdict or the read's error (see parse_buffered, read_failed). Adds the
// bytes read from the socket to `*received` when given.
template <class Parser>
awaitable<error_code> parse_some(tcp::socket& sock, beast::flat_buffer& in, Parser& parser,
                                 std::size_t* received = nullptr) {
    error_code ec;
    while (!parse_buffered(in, parser, ec)) {
        auto [rec, n] = co_await sock.async_read_some(in.prepare(kReadSize), use_tuple);
        if (rec) {
            co_return read_failed(parser, rec);
        }
        in.commit(n);
        if (received != nullptr) {
            *received += n;
        }
    }
    co_return ec;
}

// One non-blocking gather send of `buffers`. True when that settled it: all bytes went out
// (`ec` clear) or the socket failed (`ec` set). False when the socket's send buffer is full:
// `sent` bytes went out and the rest must go through send_rest().
template <class Buffers>
bool send_now(tcp::socket& sock, const Buffers& buffers, std::size_t& sent, error_code& ec) {
    sent = 0;
    ec = {};
    if (!sock.non_blocking()) {
        sock.non_blocking(true, ec);  // write_some below must never block
        if (ec) {
            ec = {};
            return false;
        }
    }
    sent = sock.write_some(buffers, ec);
    // (A clear code first: comparing one with an enumerator costs a category lookup.)
    if (ec && (ec == net::error::would_block || ec == net::error::try_again)) {
        ec = {};
        sent = 0;
        return false;
    }
    return ec || sent == net::buffer_size(buffers);
}

// The bytes of `buffers` after the first `sent`, with async_write under `timeout`.
template <class Buffers>
awaitable<error_code> send_rest(beast::tcp_stream& stream, const Buffers& buffers, std::size_t sent,
                                Duration timeout) {
    beast::buffers_suffix<Buffers> rest(buffers);
    rest.consume(sent);
    stream.expires_after(timeout);
    auto [wec, n] = co_await net::async_write(stream, rest, use_tuple);
    (void)n;
    co_return wec;
}

// Sends all of `buffers` on a beast::tcp_stream: at once, with one non-blocking gather send,
// when the socket's send buffer takes them all (the common case: no timer, no suspension, no
// completion to dispatch, no coroutine frame); `ec` then holds the result. Otherwise returns
// the awaitable that sends the rest with async_write under `timeout`; await it at once (it
// refers to `buffers`):
//     if (auto rest = wire::send_or_rest(stream, buffers, timeout, ec)) ec = co_await ...;
template <class Buffers>
std::optional<awaitable<error_code>> send_or_rest(beast::tcp_stream& stream, const Buffers& buffers,
                                                  Duration timeout, error_code& ec) {
    std::size_t sent = 0;
    if (send_now(stream.socket(), buffers, sent, ec)) {
        return std::nullopt;
    }
    return send_rest(stream, buffers, sent, timeout);
}

}  // namespace pdr::wire
