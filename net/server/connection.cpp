// The connection loop: waits for each request on a keep-alive connection, reads it
// (request_reader.cpp), and runs the handler on its Exchange (exchange.cpp) while a read on the
// socket watches for the client going away.
#include "net/server/connection.hpp"

#include "net/common/log.hpp"
#include "net/server/exchange.hpp"
#include "net/server/request_reader.hpp"

#include <optional>

namespace pdr::server::detail {

namespace {

constexpr std::size_t kMaxPipelinedBytes = 64 * 1024;  // kept while the handler runs
constexpr std::size_t kWatchReadSize = 4096;

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

// Waits (until `deadline`) for the first bytes of the next request. False: close quietly.
awaitable<bool> wait_for_request(Connection& conn, Clock::time_point deadline) {
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
    conn.read_deadline.expires_at(deadline);
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
      watch_done(s.executor),
      body_charge(s.body_budget) {
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
    if (body_wait != nullptr) {
        body_wait->cancel();
    }
    error_code ec;
    stream.socket().shutdown(tcp::socket::shutdown_both, ec);
    stream.close();
}

awaitable<void> run_connection(std::shared_ptr<ServerState> state, tcp::socket sock,
                               net::cancellation_signal& cancel, bool probe_only,
                               std::optional<net::ip::address> source) {
    Connection conn(*state, std::move(sock));
    conn.probe_only = probe_only;
    state->connections.push_front(&conn);
    conn.pos = state->connections.begin();
    // admit() counted the connection (and its source, when it did); given back here, however it
    // ends.
    struct Guard {
        ServerState& s;
        Connection& c;
        std::optional<net::ip::address> source;
        ~Guard() {
            s.connections.erase(c.pos);
            {
                ConnectionCounts& n = *s.counts;
                const std::lock_guard<std::mutex> lock(n.m);
                (c.probe_only ? n.probe : n.open) -= 1;
                if (source) {
                    const auto it = n.per_source.find(*source);
                    if (it != n.per_source.end() && --it->second == 0) {
                        n.per_source.erase(it);
                    }
                }
            }
            s.connection_ended();
        }
    } guard{*state, conn, std::move(source)};

    const Limits& limits = state->limits;
    bool first = true;
    Preamble pre;  // blank lines before the next request
    for (;;) {
        conn.body_charge.reset();  // the last exchange, and its request body, are gone
        const Clock::time_point wait_until = pre.deadline.value_or(
            Clock::now() + (first ? limits.read_timeout : limits.idle_timeout));
        if (!co_await wait_for_request(conn, wait_until)) {
            break;
        }
        const BlankLines lines = skip_blank_lines(conn, pre);
        if (lines == BlankLines::TooMany) {
            co_await refuse(conn, Errc::BadHttp, "malformed HTTP request", 11);
            break;
        }
        if (lines == BlankLines::Only) {
            continue;
        }
        first = false;
        const Clock::time_point deadline =
            pre.deadline.value_or(Clock::now() + limits.read_timeout);
        pre = {};
        std::optional<Request> req = co_await read_request(conn, deadline);
        if (!req) {
            break;
        }
        if (conn.probe_only) {
            // A reserved slot: one probe request, answered with `Connection: close`.
            if (!limits.is_probe(*req)) {
                co_await refuse(conn, Errc::TooManyConnections,
                                "too many client connections (only probe routes are served)",
                                req->version(), &*req);
                break;
            }
            req->keep_alive(false);
        }

        conn.phase = Connection::Phase::Busy;
        ExchangeImpl ex(conn, std::move(*req));
        req.reset();
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

awaitable<void> reject_connection(std::shared_ptr<ServerState> state, tcp::socket sock,
                                  std::string why) {
    Connection conn(*state, std::move(sock));
    conn.pos = state->connections.end();
    ++state->pending_rejects;
    co_await refuse(conn, Errc::TooManyConnections, why, 11);
    conn.close();
    --state->pending_rejects;
}

}  // namespace pdr::server::detail
