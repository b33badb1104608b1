#include "router/upstream/pool.hpp"

#include <sys/socket.h>

#include <cerrno>

namespace pdr::upstream {

namespace {

// A pooled connection is usable if the peer has neither closed it nor sent anything unasked.
bool looks_alive(detail::Conn& c) {
    auto& sock = c.stream.socket();
    if (!sock.is_open() || c.buffer.size() != 0) {
        return false;
    }
    char byte;
    ssize_t n = ::recv(sock.native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
}

void close_conn(detail::Conn& c) {
    error_code ec;
    c.stream.socket().shutdown(tcp::socket::shutdown_both, ec);
    c.stream.close();
}

}  // namespace

Client::Impl::~Impl() {
    close_all();
}

detail::ConnPtr Client::Impl::take(const std::string& key) {
    auto it = idle.find(key);
    if (it == idle.end()) {
        return nullptr;
    }
    auto& list = it->second;
    const auto now = Clock::now();
    while (!list.empty()) {
        detail::ConnPtr c = std::move(list.back());
        list.pop_back();
        --idle_count;
        if (now - c->idle_since <= limits.idle_ttl && looks_alive(*c)) {
            return c;
        }
        close_conn(*c);
    }
    return nullptr;
}

void Client::Impl::give_back(const std::string& key, detail::ConnPtr c) {
    if (limits.max_idle_per_endpoint == 0 || !c->stream.socket().is_open() ||
        c->buffer.size() != 0) {
        close_conn(*c);
        return;
    }
    auto& list = idle[key];
    const auto now = Clock::now();
    // Oldest first: drop expired ones and make room.
    std::size_t expired = 0;
    while (expired < list.size() && now - list[expired]->idle_since > limits.idle_ttl) {
        ++expired;
    }
    if (list.size() - expired >= limits.max_idle_per_endpoint) {
        expired = list.size() - limits.max_idle_per_endpoint + 1;
    }
    for (std::size_t i = 0; i < expired; ++i) {
        close_conn(*list[i]);
    }
    list.erase(list.begin(), list.begin() + static_cast<std::ptrdiff_t>(expired));
    idle_count -= expired;
    c->idle_since = now;
    c->stream.expires_never();
    list.push_back(std::move(c));
    ++idle_count;
}

void Client::Impl::close_all() {
    for (auto& [key, list] : idle) {
        for (auto& c : list) {
            close_conn(*c);
        }
    }
    idle.clear();
    idle_count = 0;
}

void Client::Impl::close_key(const std::string& key) {
    auto it = idle.find(key);
    if (it == idle.end()) {
        return;
    }
    for (auto& c : it->second) {
        close_conn(*c);
    }
    idle_count -= it->second.size();
    idle.erase(it);
}

awaitable<std::pair<Failure, error_code>> Client::Impl::connect(detail::Conn& c, const Endpoint& ep,
                                                                const Timeouts& t) {
    error_code ec;
    auto addr = net::ip::make_address(ep.host, ec);
    if (!ec) {
        c.stream.expires_after(t.connect);
        auto [cec] = co_await c.stream.async_connect(tcp::endpoint(addr, ep.port), use_tuple);
        ec = cec;
    } else {
        // A DNS name: resolve (no timeout of its own), then connect under Timeouts::connect.
        Resolver resolver(executor);
        const std::string service = std::to_string(ep.port);
        auto [rec, results] = co_await resolver.async_resolve(ep.host, service);
        if (rec) {
            co_return std::pair{
                rec == net::error::operation_aborted ? Failure::Canceled : Failure::Connect, rec};
        }
        // The resolver does not honour per-operation cancellation: check by hand.
        auto cs = co_await net::this_coro::cancellation_state;
        if (cs.cancelled() != net::cancellation_type::none) {
            co_return std::pair{Failure::Canceled, error_code{net::error::operation_aborted}};
        }
        c.stream.expires_after(t.connect);
        auto [cec, endpoint] = co_await c.stream.async_connect(results, use_tuple);
        (void)endpoint;
        ec = cec;
    }
    if (ec) {
        Failure f = Failure::Connect;
        if (ec == beast::error::timeout) {
            f = Failure::ConnectTimeout;
        } else if (ec == net::error::operation_aborted) {
            f = Failure::Canceled;
        }
        close_conn(c);
        co_return std::pair{f, ec};
    }
    error_code opt_ec;
    c.stream.socket().set_option(tcp::no_delay(true), opt_ec);
    co_return std::pair{Failure::None, error_code{}};
}

namespace detail {

bool is_stale_error(const error_code& ec) noexcept {
    return ec == http::error::end_of_stream || ec == net::error::eof ||
           ec == net::error::connection_reset || ec == net::error::broken_pipe ||
           ec == net::error::connection_aborted || ec == net::error::not_connected;
}

Failure classify_write(const error_code& ec) noexcept {
    if (ec == beast::error::timeout) {
        return Failure::ResponseTimeout;
    }
    if (ec == net::error::operation_aborted) {
        return Failure::Canceled;
    }
    return Failure::Write;
}

Failure classify_read(const error_code& ec, Failure on_timeout) noexcept {
    if (ec == beast::error::timeout) {
        return on_timeout;
    }
    if (ec == net::error::operation_aborted) {
        return Failure::Canceled;
    }
    if (&ec.category() == &http::make_error_code(http::error::bad_method).category() &&
        ec != http::error::end_of_stream && ec != http::error::partial_message) {
        return Failure::Protocol;  // unparsable answer, or over a size limit
    }
    return Failure::Read;
}

}  // namespace detail

}  // namespace pdr::upstream
