#include "net/server/http_server.hpp"

#include "net/common/log.hpp"
#include "net/server/connection.hpp"

#include <system_error>

namespace pdr::server {

std::shared_ptr<ConnectionCounts> make_connection_counts() {
    return std::make_shared<ConnectionCounts>();
}

namespace {

[[noreturn]] void throw_system(const error_code& ec, const std::string& what) {
    throw std::system_error(std::error_code(ec), what);
}

enum class Admission { Serve, ProbeOnly, Full, PerSource };

struct Admitted {
    Admission how = Admission::Full;
    std::optional<net::ip::address> source;  // counted in per_source (given back at the end)
};

// Whether a new connection is served: under --max-client-connections, yes; past it, on one of
// the reserved probe slots while one is free; never past the per-source limit. A served one is
// counted at once (run_connection gives its count back), in the counts the server may share.
template <class Socket>
Admitted admit(detail::ServerState& state, const Socket& sock) {
    const Limits& l = state.limits;
    ConnectionCounts& c = *state.counts;
    // The peer's address only where a per-source limit needs it (one syscall per accept).
    std::optional<net::ip::address> source;
    if (l.max_connections_per_source > 0) {
        error_code ec;
        const tcp::endpoint remote = sock.remote_endpoint(ec);
        if (!ec) {
            source = remote.address();
        }
    }
    const std::lock_guard<std::mutex> lock(c.m);
    if (source) {
        const auto it = c.per_source.find(*source);
        if (it != c.per_source.end() && it->second >= l.max_connections_per_source) {
            return {Admission::PerSource, {}};
        }
    }
    Admitted a;
    if (c.open < l.max_connections) {
        ++c.open;
        a.how = Admission::Serve;
    } else if (c.probe < l.reserved_probe_connections && l.is_probe) {
        ++c.probe;
        a.how = Admission::ProbeOnly;
    } else {
        return a;
    }
    if (source) {
        ++c.per_source[*source];
        a.source = std::move(source);
    }
    return a;
}

awaitable<void> accept_loop(std::shared_ptr<detail::ServerState> state) {
    for (;;) {
        auto [ec, sock] = co_await state->acceptor.async_accept();
        if (ec == net::error::operation_aborted || !state->acceptor.is_open() || state->draining) {
            co_return;
        }
        if (ec) {
            // Out of descriptors and the like: back off a little and go on.
            PDR_WARN("server", "accept failed: " + ec.message());
            Timer pause(state->executor);
            pause.expires_after(Duration{100});
            co_await pause.async_wait();
            continue;
        }
        Admitted admitted = admit(*state, sock);
        if (admitted.how == Admission::PerSource || admitted.how == Admission::Full) {
            std::string why = admitted.how == Admission::PerSource
                                  ? "too many connections from this address"
                                  : "too many client connections";
            net::co_spawn(state->executor,
                          detail::reject_connection(state, std::move(sock), std::move(why)),
                          net::detached);
            continue;
        }
        const bool probe_only = admitted.how == Admission::ProbeOnly;
        // The signal cancels the handler when its client goes away (see watch_client); the
        // completion handler owns it, so it outlives the coroutine and its slot.
        auto cancel = std::make_shared<net::cancellation_signal>();
        auto slot = cancel->slot();
        net::co_spawn(state->executor,
                      detail::run_connection(state, std::move(sock), *cancel, probe_only,
                                             std::move(admitted.source)),
                      net::bind_cancellation_slot(slot, [cancel](const std::exception_ptr& e) {
                          if (!e) {
                              return;
                          }
                          try {
                              std::rethrow_exception(e);
                          } catch (const std::exception& ex) {
                              PDR_ERROR("server", std::string("connection failed: ") + ex.what());
                          }
                      }));
    }
}

}  // namespace

namespace detail {

ServerState::ServerState(net::any_io_executor ex, Limits l, Handler h)
    : executor(ex),
      limits(l),
      handler(std::move(h)),
      acceptor(ex),
      counts(l.counts ? l.counts : make_connection_counts()),
      body_budget(ex, l.max_buffered_body_bytes),
      drain_event(ex) {}

void ServerState::connection_ended() {
    if (draining && connections.empty()) {
        drain_event.cancel();
    }
}

}  // namespace detail

struct HttpServer::Impl : detail::ServerState {
    using ServerState::ServerState;
};

HttpServer::HttpServer(net::any_io_executor executor, Limits limits, Handler handler)
    : impl_(std::make_shared<Impl>(std::move(executor), limits, std::move(handler))) {}

HttpServer::~HttpServer() {
    // Coroutines still running keep the state alive; close everything so they end.
    error_code ec;
    impl_->draining = true;
    impl_->acceptor.close(ec);
    for (auto* c : impl_->connections) {
        c->close();
    }
}

unsigned short HttpServer::listen(const std::string& host, unsigned short port, bool reuse_port) {
    error_code ec;
    tcp::endpoint ep;
    auto addr = net::ip::make_address(host, ec);
    if (!ec) {
        ep = tcp::endpoint(addr, port);
    } else {
        tcp::resolver resolver(impl_->executor);
        auto results = resolver.resolve(host, std::to_string(port), ec);
        if (ec || results.empty()) {
            throw_system(ec ? ec : net::error::host_not_found, "resolve " + host);
        }
        ep = results.begin()->endpoint();
    }
    auto& acc = impl_->acceptor;
    acc.open(ep.protocol(), ec);
    if (ec) {
        throw_system(ec, "open listen socket");
    }
    acc.set_option(net::socket_base::reuse_address(true), ec);
    if (reuse_port) {
        acc.set_option(net::detail::socket_option::boolean<SOL_SOCKET, SO_REUSEPORT>(true), ec);
        if (ec) {
            throw_system(ec, "set SO_REUSEPORT");
        }
    }
    if (ep.address().is_v6()) {
        // "::" listens on both families; a specific v6 address only on v6.
        acc.set_option(net::ip::v6_only(!ep.address().is_unspecified()), ec);
    }
    acc.bind(ep, ec);
    if (ec) {
        throw_system(ec, "bind " + host + ":" + std::to_string(port));
    }
    acc.listen(net::socket_base::max_listen_connections, ec);
    if (ec) {
        throw_system(ec, "listen " + host + ":" + std::to_string(port));
    }
    return acc.local_endpoint().port();
}

void HttpServer::on_reject(std::function<void(Errc)> fn) {
    impl_->on_reject = std::move(fn);
}

void HttpServer::start() {
    net::co_spawn(impl_->executor, accept_loop(impl_), net::detached);
}

awaitable<void> HttpServer::drain(Duration grace) {
    std::shared_ptr<detail::ServerState> state = impl_;
    state->draining = true;
    error_code ec;
    state->acceptor.close(ec);
    // Connections waiting for their next request have nothing in flight: close them now.
    for (auto* c : state->connections) {
        if (c->phase == detail::Connection::Phase::Idle) {
            c->close();
        }
    }
    const auto deadline = Clock::now() + grace;
    while (!state->connections.empty() && Clock::now() < deadline && !state->grace_over) {
        state->drain_event.expires_at(deadline);
        co_await state->drain_event.async_wait();
    }
    std::size_t told = 0;
    std::size_t closed = 0;
    for (auto* c : state->connections) {
        const auto cut = c->phase == detail::Connection::Phase::Reading
                             ? detail::ShutdownCut::Closed
                             : detail::cut_for_shutdown(*c);
        told += cut == detail::ShutdownCut::Told ? 1 : 0;
        closed += cut == detail::ShutdownCut::Closed ? 1 : 0;
        c->close();
    }
    if (told + closed > 0) {
        PDR_WARN("server", "shutdown grace of " + std::to_string(grace.count()) +
                               " ms ended with " + std::to_string(told + closed) +
                               " request(s) unfinished: " + std::to_string(told) +
                               " client(s) got a 503 or an SSE error event, " +
                               std::to_string(closed) +
                               " were closed without one (still sending their request, or not "
                               "reading); upstream legs are cancelled");
    }
    while (!state->connections.empty() || state->pending_rejects > 0) {
        // Closed sockets make every coroutine finish promptly; poll briefly for stragglers.
        state->drain_event.expires_after(Duration{10});
        co_await state->drain_event.async_wait();
        if (state->connections.empty() && state->pending_rejects == 0) {
            break;
        }
        for (auto* c : state->connections) {
            c->close();
        }
    }
}

void HttpServer::end_grace() {
    if (impl_->draining && !impl_->grace_over) {
        impl_->grace_over = true;
        impl_->drain_event.cancel();
    }
}

std::size_t HttpServer::active_connections() const noexcept {
    return impl_->connections.size();
}

std::size_t HttpServer::buffered_body_bytes() const noexcept {
    return impl_->body_budget.used();
}

std::size_t HttpServer::body_budget_waiters() const noexcept {
    return impl_->body_budget.waiting();
}

}  // namespace pdr::server
