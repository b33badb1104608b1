#include "net/upstream/pool.hpp"

#include "net/common/http_wire.hpp"

#include <algorithm>
#include <optional>

namespace pdr::upstream::detail {

StreamImpl::StreamImpl(std::weak_ptr<Client::Impl> pool, std::string key, ConnPtr conn,
                       const Timeouts& t, bool keep_alive, bool head_request, std::size_t max_body,
                       bool whole_exchange)
    : pool_(std::move(pool)),
      key_(std::move(key)),
      conn_(std::move(conn)),
      timeouts_(t),
      keep_alive_(keep_alive),
      head_request_(head_request),
      whole_exchange_(whole_exchange),
      max_body_(max_body),
      chunked_(wire::kMaxUnparsed) {}

StreamImpl::~StreamImpl() {
    drop();
}

awaitable<std::pair<Failure, error_code>> StreamImpl::read_head() {
    if (!whole_exchange_) {  // (a whole exchange's deadline was armed before the write)
        conn_->deadline.expires_after(timeouts_.response);
    }
    auto& in = conn_->buffer;
    error_code ec;
    // The head is parsed whole, from its start: again only once its end (an empty line) has come,
    // or once the bytes have doubled since the last try (which also judges what came so far), so
    // a head that arrives a few bytes at a time costs a few parses, not one per read.
    std::size_t tried = 0;     // bytes buffered at the last parse that needed more
    std::size_t searched = 0;  // bytes searched for the head's end
    for (;;) {
        const std::string_view text(static_cast<const char*>(in.data().data()), in.size());
        const bool ended =
            text.find("\r\n\r\n", searched < 3 ? 0 : searched - 3) != std::string_view::npos;
        searched = text.size();
        got_some_ = got_some_ || !text.empty();
        if (!text.empty() && (ended || tried == 0 || text.size() >= 2 * tried ||
                              text.size() >= kMaxResponseHeader)) {
            std::size_t used = 0;
            const auto parsed =
                wire::parse_response_head(text, kMaxResponseHeader, head_request_, head_, used, ec);
            if (parsed == wire::HeadParse::Done) {
                in.consume(used);  // the body's bytes stay buffered
                break;
            }
            if (parsed == wire::HeadParse::Failed) {
                break;
            }
            tried = text.size();
        }
        auto [rec, n] =
            co_await conn_->stream.socket().async_read_some(in.prepare(wire::kReadSize), use_tuple);
        conn_->quiet_since = Clock::now();  // upstream bytes arrived (or it failed)
        if (rec) {
            // The upstream closed before its answer's head ended.
            ec = rec != net::error::eof ? rec
                 : got_some_            ? error_code(http::error::partial_message)
                                        : error_code(http::error::end_of_stream);
            break;
        }
        in.commit(n);
    }
    // Until the caller reads the body, it does not wait on the upstream.
    conn_->quiet_since = Clock::time_point::max();
    ec = io_error(*conn_, ec);
    if (ec) {
        Failure f = canceled_ ? Failure::Canceled : classify_read(ec, Failure::ResponseTimeout);
        co_return std::pair{f, ec};
    }
    if (!detail::final_status(head_.fields.result_int())) {
        drop();
        co_return std::pair{Failure::Protocol, error_code{http::error::bad_status}};
    }
    // A head without a body is complete at the first read: until then the caller may still
    // refuse it, and the connection is not pooled behind its back.
    length_left_ = head_.length;
    co_return std::pair{Failure::None, error_code{}};
}

bool StreamImpl::take_buffered(std::string& out, error_code& ec) {
    auto& in = conn_->buffer;
    const std::string_view bytes(static_cast<const char*>(in.data().data()), in.size());
    switch (head_.body) {
        case wire::BodyEnd::Chunked: {
            in.consume(chunked_.decode(bytes, out, ec));
            return chunked_.done();
        }
        case wire::BodyEnd::Length: {
            const auto n =
                static_cast<std::size_t>(std::min<std::uint64_t>(length_left_, bytes.size()));
            out.append(bytes.data(), n);
            in.consume(n);
            length_left_ -= n;
            return length_left_ == 0;
        }
        case wire::BodyEnd::ToEof:
            out.append(bytes);
            in.consume(bytes.size());
            return false;
        case wire::BodyEnd::None:
            break;
    }
    return true;
}

awaitable<Failure> StreamImpl::read_some(std::string& out) {
    if (done_) {
        co_return Failure::None;
    }
    if (canceled_) {
        co_return Failure::Canceled;
    }
    if (deferred_ != Failure::None) {
        co_return deferred_;
    }
    if (closed_ || !conn_) {
        co_return Failure::Read;
    }
    // Waiting on the upstream from now until this read returns (Client::fail_stalled).
    struct Waiting {
        StreamImpl& s;
        ~Waiting() {
            if (s.conn_) {
                s.conn_->quiet_since = Clock::time_point::max();
            }
        }
    } waiting{*this};
    conn_->quiet_since = Clock::now();
    // Timeouts::idle from each call on (not the response timeout read_head armed, when this
    // call is served from the buffer while the client is slow to take it); the response
    // timeout still, for a whole exchange.
    if (!whole_exchange_) {
        conn_->deadline.expires_after(timeouts_.idle);
    }
    const Failure on_timeout = whole_exchange_ ? Failure::ResponseTimeout : Failure::IdleTimeout;
    const std::size_t start = out.size();
    try {
        for (;;) {
            // Body bytes already buffered are passed on before waiting for more input.
            error_code ec;
            const bool complete = take_buffered(out, ec);
            if (ec) {  // a malformed body
                drop();
                error_ = ec;
                const Failure f = classify_read(ec, on_timeout);
                if (out.size() > start) {
                    // Body bytes taken before the error are good: they go out first, the
                    // failure with the next call.
                    deferred_ = f;
                    co_return Failure::None;
                }
                co_return f;
            }
            if (complete) {
                finish();
                co_return Failure::None;
            }
            if (out.size() > start) {
                co_return Failure::None;
            }
            auto [read_ec, n] = co_await conn_->stream.socket().async_read_some(
                conn_->buffer.prepare(wire::kReadSize), use_tuple);
            if (read_ec && head_.body == wire::BodyEnd::ToEof && read_ec == net::error::eof) {
                finish();  // the end of a body that ends with the connection
                co_return Failure::None;
            }
            if (read_ec) {
                // The upstream closed inside a body that says where it ends: partial_message.
                ec = io_error(*conn_, read_ec == net::error::eof
                                          ? error_code(http::error::partial_message)
                                          : read_ec);
                error_ = ec;
                const Failure f = canceled_ ? Failure::Canceled : classify_read(ec, on_timeout);
                canceled_ = f == Failure::Canceled;
                drop();
                co_return f;
            }
            conn_->buffer.commit(n);
            conn_->quiet_since = Clock::now();
        }
    } catch (const boost::system::system_error& e) {
        // The calling coroutine was cancelled between two operations.
        error_ = e.code();
    }
    canceled_ = true;
    drop();
    co_return Failure::Canceled;
}

bool StreamImpl::take_whole_body(std::string& out) {
    if (done_ || canceled_ || closed_ || !conn_ || deferred_ != Failure::None) {
        return false;
    }
    const std::size_t buffered = conn_->buffer.size();
    bool whole = false;
    switch (head_.body) {
        case wire::BodyEnd::None:
            whole = true;
            break;
        case wire::BodyEnd::Length:
            whole = buffered >= length_left_ && length_left_ <= max_body_;
            break;
        case wire::BodyEnd::Chunked:
        case wire::BodyEnd::ToEof:
            break;  // their end is known only by reading: read_all
    }
    if (!whole) {
        return false;
    }
    error_code ec;
    const bool complete = take_buffered(out, ec);
    (void)ec;  // (a length cannot be malformed)
    if (complete) {
        finish();
    }
    return complete;
}

awaitable<Failure> StreamImpl::read_all(std::string& out) {
    const std::size_t start = out.size();
    // A declared length over the limit fails before a byte is read; one within it is the
    // capacity. Else the string grows by doubling, but never past the limit plus one read: the
    // memory of one answer stays near the limit, not twice it.
    const std::optional<std::uint64_t> declared =
        head_.body == wire::BodyEnd::Length ? std::optional(head_.length) : std::nullopt;
    if (declared && *declared > max_body_) {
        drop();
        error_ = http::error::body_limit;
        co_return Failure::TooLarge;
    }
    const std::size_t cap = start + max_body_ + kBufferSize;
    if (declared) {
        out.reserve(start + static_cast<std::size_t>(*declared));
    }
    while (!done_) {
        if (out.capacity() - out.size() < kBufferSize) {
            out.reserve(std::min(cap, std::max(out.capacity() * 2, out.size() + kBufferSize)));
        }
        Failure f = co_await read_some(out);
        if (f != Failure::None) {
            co_return f;
        }
        if (out.size() - start > max_body_) {
            drop();
            error_ = http::error::body_limit;
            co_return Failure::TooLarge;
        }
    }
    co_return Failure::None;
}

void StreamImpl::cancel() {
    if (done_) {
        return;
    }
    canceled_ = true;
    drop();
}

void StreamImpl::finish() {
    done_ = true;
    if (!conn_) {
        return;
    }
    auto pool = pool_.lock();
    // A body that ended with the connection leaves nothing to reuse.
    if (pool && keep_alive_ && head_.body != wire::BodyEnd::ToEof && head_.keep_alive) {
        pool->give_back(key_, std::move(conn_));
    } else {
        drop();
    }
}

void StreamImpl::drop() {
    if (conn_ && !closed_) {
        closed_ = true;
        error_code ec;
        conn_->stream.socket().shutdown(tcp::socket::shutdown_both, ec);
        conn_->stream.close();
        // Keep the object: a pending operation may still reference it until it completes.
    }
}

}  // namespace pdr::upstream::detail
