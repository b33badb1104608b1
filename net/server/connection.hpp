#pragma once
// Internals of HttpServer shared by the files of net/server (not a public header).
#include "net/common/deadline.hpp"
#include "net/common/error.hpp"
#include "net/server/body_budget.hpp"
#include "net/server/http_server.hpp"

#include <list>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace pdr::server::detail {

struct ServerState;
class ExchangeImpl;

// The read that watches the client while a handler runs (see watch_client in connection.cpp).
// Shared with the read's completion handler, which may run after the Connection is gone.
struct Watch {
    bool pending = false;   // a read is in flight
    bool alive = true;      // false once the Connection is gone
    bool stopping = false;  // wait_for_request cancelled the read to parse
    error_code ec;          // how the last read ended (EOF, reset, ...)
    beast::flat_buffer* buffer = nullptr;
    ExchangeImpl* exchange = nullptr;            // set while a handler runs
    net::cancellation_signal* cancel = nullptr;  // cancels the connection coroutine's handler
    // Between requests: cancelled when the read completes (wait_for_request waits on it). Not
    // an async_wait on the socket queued behind the read: when the read finds EOF, Asio's
    // reactor stops at it, and edge-triggered epoll never reports the socket again.
    Timer* done = nullptr;
};

// One client connection; lives in its coroutine's frame.
struct Connection {
    enum class Phase { Idle, Reading, Busy };

    Connection(ServerState& s, tcp::socket sock);
    ~Connection();

    ServerState& server;
    // Requests are read from stream.socket() under `read_deadline` (no timer per read);
    // Beast's own timer is used only for writes that did not go out at once.
    beast::tcp_stream stream;
    Deadline read_deadline;  // on expiry the connection is closed
    beast::flat_buffer buffer;
    tcp::endpoint remote;
    Phase phase = Phase::Idle;
    bool probe_only = false;  // a reserved probe slot: serves one probe request, nothing else
    std::string head_buf;     // scratch for serialized response heads (reused per response)
    std::list<Connection*>::iterator pos;  // in ServerState::connections
    std::shared_ptr<Watch> watch = std::make_shared<Watch>();
    Timer watch_done;            // see Watch::done
    BodyCharge body_charge;      // the request body's share of the server's budget
    Timer* body_wait = nullptr;  // while waiting for that share: cancelled by close()

    // Closes the socket now; pending operations complete with operation_aborted.
    void close() noexcept;
};

}  // namespace pdr::server::detail

namespace pdr::server {

struct ConnectionCounts {
    std::mutex m;
    std::size_t open = 0;   // served connections not on a reserved probe slot
    std::size_t probe = 0;  // connections on reserved probe slots
    std::map<net::ip::address, std::size_t> per_source;  // all of them, per client address
};

}  // namespace pdr::server

namespace pdr::server::detail {

// The part of HttpServer that the connection coroutines share (kept alive by them).
struct ServerState {
    ServerState(net::any_io_executor ex, Limits l, Handler h);

    net::any_io_executor executor;
    Limits limits;
    Handler handler;
    Acceptor acceptor;
    bool draining = false;
    bool grace_over = false;  // end_grace() was called during a drain
    std::list<Connection*> connections;
    std::size_t pending_rejects = 0;  // over-limit connections being answered 503
    // Admitted connections, with those of the servers sharing limits.counts (else this one's).
    std::shared_ptr<ConnectionCounts> counts;
    BodyBudget body_budget;               // Limits::max_buffered_body_bytes
    Timer drain_event;                    // cancelled when the last connection ends while draining
    std::function<void(Errc)> on_reject;  // see HttpServer::on_reject

    void connection_ended();
};

// `cancel` is the signal bound to this coroutine's cancellation slot.
awaitable<void> run_connection(std::shared_ptr<ServerState> state, tcp::socket sock,
                               net::cancellation_signal& cancel, bool probe_only,
                               std::optional<net::ip::address> source);
// Answers 503 too_many_connections with `why` and closes.
awaitable<void> reject_connection(std::shared_ptr<ServerState> state, tcp::socket sock,
                                  std::string why);

// The shutdown grace ended while `conn` runs a handler: tells its client (503, or an SSE error
// event) when its socket takes the bytes at once, closes the connection and cancels the
// handler. None: no request was running; Closed: cut without a word (a client that stopped
// reading, a write half done, a request still being read).
enum class ShutdownCut { None, Told, Closed };
ShutdownCut cut_for_shutdown(Connection& conn);

// 4xx/5xx answer with an OpenAI error body and `Connection: close`.
Response make_error_response(Errc e, std::string_view message, unsigned version);

}  // namespace pdr::server::detail
