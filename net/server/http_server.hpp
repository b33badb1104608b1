#pragma once
// A small HTTP/1.1 server on Boost.Beast coroutines, shared by pdrouter and pdsim.
// One coroutine per client connection; per request a new parser with header/body limits;
// keep-alive; graceful drain. The handler gets an Exchange and either answers at once
// (respond) or streams (begin_stream / write_chunk / end_stream, chunked encoding).
//
// Client disconnects: while the handler runs, the server watches the client socket. If the
// client closes, the handler's coroutine is cancelled through its cancellation slot, the one
// signal of a client that went away: its pending co_await completes with
// net::error::operation_aborted (an upstream leg's read or connect ends, closing its socket),
// and with Asio's default throw_if_cancelled the next co_await throws, so the handler unwinds.
#include "net/common/error.hpp"
#include "net/common/io.hpp"

#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace pdr::server {

// Connection counts that several servers share, so that their connection limits
// (max_connections, reserved_probe_connections, max_connections_per_source) bound them together:
// a router's worker threads each run a server on one port. Thread-safe; opaque.
struct ConnectionCounts;
std::shared_ptr<ConnectionCounts> make_connection_counts();

struct Limits {
    std::size_t max_header_bytes = 16 * 1024;
    std::size_t max_body_bytes = 8 * 1024 * 1024;
    Duration read_timeout{30'000};   // reading one request (headers + body)
    Duration idle_timeout{75'000};   // keep-alive wait for the next request
    Duration write_timeout{30'000};  // one write to a slow client
    std::size_t max_connections = 10'000;
    // Past max_connections, this many more connections are taken for probe requests only
    // (`is_probe`); any other request on them gets 503 too_many_connections.
    std::size_t reserved_probe_connections = 0;
    std::function<bool(const http::request_header<>&)> is_probe;
    std::size_t max_connections_per_source = 0;  // per client address; 0: no limit
    // Shared with other servers (make_connection_counts); null: this server counts alone.
    std::shared_ptr<ConnectionCounts> counts;
    // Request-body bytes all connections may buffer together, counting bodies still being
    // received (their whole Content-Length); a request that would go over waits for bytes to
    // be given back until its read deadline, then gets 503 server_busy. 0: no limit.
    std::size_t max_buffered_body_bytes = 0;
    // Not a limit: how the error answers and events of a shutdown name this server ("the
    // router shut down before ...").
    std::string name = "router";
};

using Request = http::request<http::string_body>;
using Response = http::response<http::string_body>;

class Exchange {
public:
    virtual ~Exchange() = default;

    virtual const Request& request() const = 0;
    virtual std::string remote_address() const = 0;

    // Sends a whole response (Content-Length set by the server; keep-alive follows the request).
    virtual awaitable<error_code> respond(Response res) = 0;

    // Streaming: sends the head with `Transfer-Encoding: chunked`, then one chunk per call
    // (each written to the socket before the call returns), then the last chunk. To an
    // HTTP/1.0 client, or when `head` is HTTP/1.0: no framing, the close ends the body.
    virtual awaitable<error_code> begin_stream(http::response<http::empty_body> head) = 0;
    // begin_stream, but the head is held and goes out in one write with the first chunk (or
    // with the end of the body): for a body whose first bytes are already at hand, one send
    // instead of two. The default sends it at once. A handler that holds the head must write
    // (a chunk, even an empty one, or the end): one that returns or aborts before that leaves
    // the client with a closed connection and no answer at all.
    virtual awaitable<error_code> begin_stream_held(http::response<http::empty_body> head) {
        co_return co_await begin_stream(std::move(head));
    }
    virtual awaitable<error_code> write_chunk(std::string_view data) = 0;
    // write_chunk without a coroutine when the chunk goes out at once: `ec` is then the result
    // and nothing is returned; otherwise returns what sends the rest, to be awaited at once
    // (it refers to `data`). The default always returns write_chunk(data).
    //     if (auto rest = ex.write_chunk_or_rest(data, ec)) ec = co_await std::move(*rest);
    virtual std::optional<awaitable<error_code>> write_chunk_or_rest(std::string_view data,
                                                                     error_code& ec) {
        ec = {};
        return write_chunk(data);
    }
    virtual awaitable<error_code> end_stream() = 0;
    // write_chunk_or_rest and end_stream in one write: the last chunk and the end of the body.
    // The default writes the chunk, then ends the stream.
    virtual std::optional<awaitable<error_code>> write_last_chunk_or_rest(std::string_view data,
                                                                          error_code& ec) {
        ec = {};
        return chunk_then_end(data);
    }

    // The request id the handler answers under: the server puts it (as X-Request-Id) on the
    // answers it makes itself for this exchange (the 503 when a shutdown cuts it).
    virtual void set_request_id(std::string /*id*/) {}

    // Ends the connection without finishing the response (after a mid-stream failure, so the
    // client sees a truncated stream rather than a clean end).
    virtual void abort() = 0;

    // True once respond() or begin_stream() has been called.
    virtual bool responded() const = 0;
    // True once the client has closed its side (or the connection failed). Set before the
    // handler is cancelled: what the cancellation interrupted can tell why.
    virtual bool client_gone() const = 0;

private:
    awaitable<error_code> chunk_then_end(std::string_view data) {
        if (error_code ec = co_await write_chunk(data)) {
            co_return ec;
        }
        co_return co_await end_stream();
    }
};

using Handler = std::function<awaitable<void>(Exchange&)>;

// Answers for requests the server rejects before a handler sees them (413, 431, 400 bad
// HTTP). The body is produced by the router's error table (OpenAI shape).
class HttpServer {
public:
    HttpServer(net::any_io_executor executor, Limits limits, Handler handler);
    ~HttpServer();
    HttpServer(const HttpServer&) = delete;
    HttpServer& operator=(const HttpServer&) = delete;

    // Binds and listens (throws std::system_error at start-up on failure). Port 0 picks a
    // free port; the bound port is returned. Call once, then start(). `reuse_port`: with
    // SO_REUSEPORT, so that other servers (a router's other workers) listen on the same port
    // and the kernel spreads connections between them.
    unsigned short listen(const std::string& host, unsigned short port, bool reuse_port = false);
    void start();
    // Called (on the server's executor) for every request the server answers itself before a
    // handler sees it: 413, 431, 400 malformed HTTP, 503 over the connection limit.
    void on_reject(std::function<void(Errc)> fn);

    // Stops accepting, lets in-flight exchanges finish for up to `grace`, then closes every
    // connection. Completes when all connection coroutines have ended.
    awaitable<void> drain(Duration grace);
    // Ends a running drain's grace now (as if it had run out); no-op otherwise.
    void end_grace();

    std::size_t active_connections() const noexcept;
    // Request-body bytes held against Limits::max_buffered_body_bytes now, and the requests
    // waiting for some (0 without a limit).
    std::size_t buffered_body_bytes() const noexcept;
    std::size_t body_budget_waiters() const noexcept;

private:
    struct Impl;
    std::shared_ptr<Impl> impl_;
};

}  // namespace pdr::server
