#include "net/upstream/pool.hpp"

#include "net/common/http_wire.hpp"

#include <algorithm>
#include <limits>

namespace pdr::upstream::detail {

StreamImpl::StreamImpl(std::weak_ptr<Client::Impl> pool, std::string key, ConnPtr conn,
                       const Timeouts& t, bool keep_alive, bool head_request, std::size_t max_body)
    : pool_(std::move(pool)),
      key_(std::move(key)),
      conn_(std::move(conn)),
      timeouts_(t),
      keep_alive_(keep_alive),
      max_body_(max_body) {
    // One body buffer per pooled connection, not per response: saves a 16 KiB malloc/free
    // (and the malloc consolidation it triggers) on every leg.
    if (!conn_->body_buf) {
        conn_->body_buf = std::make_unique<char[]>(kBufferSize);
    }
    buf_ = conn_->body_buf.get();
    parser_.header_limit(kMaxResponseHeader);
    parser_.body_limit(std::numeric_limits<std::uint64_t>::max());
    if (head_request) {
        parser_.skip(true);
    }
}

StreamImpl::~StreamImpl() {
    drop();
}

awaitable<std::pair<Failure, error_code>> StreamImpl::read_head() {
    conn_->deadline.expires_after(timeouts_.response);
    error_code rec;
    while (!rec && !parser_.is_header_done()) {
        rec = co_await wire::parse_some(conn_->stream.socket(), conn_->buffer, parser_);
        conn_->quiet_since = Clock::now();  // upstream bytes arrived (or it failed)
    }
    // Until the caller reads the body, it does not wait on the upstream.
    conn_->quiet_since = Clock::time_point::max();
    const error_code ec = io_error(*conn_, rec);
    if (ec) {
        Failure f = canceled_ ? Failure::Canceled : classify_read(ec, Failure::ResponseTimeout);
        co_return std::pair{f, ec};
    }
    if (!detail::final_status(parser_.get().result_int())) {
        drop();
        co_return std::pair{Failure::Protocol, error_code{http::error::bad_status}};
    }
    if (parser_.is_done()) {
        finish();
    }
    // From here on one parse takes every chunk already buffered (up to the body buffer), not
    // just the next one: a burst of stream events goes to the client in one write, while an
    // event that arrives alone is still passed on at once.
    parser_.eager(true);
    co_return std::pair{Failure::None, error_code{}};
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
    try {
        for (;;) {
            auto& body = parser_.get().body();
            body.data = buf_;
            body.size = kBufferSize;
            conn_->deadline.expires_after(timeouts_.idle);
            // wire::parse_some, inlined: one coroutine frame less per piece of a stream. Body
            // bytes the parser took are passed on before waiting for more input.
            error_code rec;
            while (!wire::parse_buffered(conn_->buffer, parser_, rec) &&
                   parser_.get().body().size == kBufferSize) {
                auto [read_ec, n] = co_await conn_->stream.socket().async_read_some(
                    conn_->buffer.prepare(wire::kReadSize), use_tuple);
                if (read_ec) {
                    rec = wire::read_failed(parser_, read_ec);
                    break;
                }
                conn_->buffer.commit(n);
                conn_->quiet_since = Clock::now();
            }
            error_code ec = io_error(*conn_, rec);
            if (ec == http::error::need_buffer) {
                ec = {};
            }
            const std::size_t got = kBufferSize - parser_.get().body().size;
            if (ec) {
                Failure f = canceled_ ? Failure::Canceled : classify_read(ec, Failure::IdleTimeout);
                canceled_ = f == Failure::Canceled;
                drop();
                if (got > 0 && !canceled_) {
                    // Body bytes taken before the error are good: they go out first, the
                    // failure with the next call.
                    out.append(buf_, got);
                    deferred_ = f;
                    co_return Failure::None;
                }
                co_return f;
            }
            out.append(buf_, got);
            if (parser_.is_done()) {
                finish();
                co_return Failure::None;
            }
            if (got > 0) {
                co_return Failure::None;
            }
        }
    } catch (const boost::system::system_error&) {
        // The calling coroutine was cancelled between two operations.
    }
    canceled_ = true;
    drop();
    co_return Failure::Canceled;
}

awaitable<Failure> StreamImpl::read_all(std::string& out) {
    const std::size_t start = out.size();
    // A declared length over the limit fails before a byte is read; one within it is the
    // capacity. Else the string grows by doubling, but never past the limit plus one read: the
    // memory of one answer stays near the limit, not twice it.
    const auto declared = parser_.content_length();
    if (declared && *declared > max_body_) {
        drop();
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
    if (pool && keep_alive_ && parser_.get().keep_alive()) {
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
