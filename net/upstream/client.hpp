#pragma once
// Upstream HTTP/1.1 client with keep-alive connection pools per endpoint. Used by the router's
// legs, health probes and lease refreshes, and by pdsim's internal calls. One Client per
// executor (io_context thread); not thread-safe.
//
// Cancellation: every awaitable here honours Asio per-operation cancellation (e.g. the
// coroutine being cancelled because the client went away) and completes with
// Failure::Canceled; ResponseStream::cancel() closes the connection at once from any code
// running on the same executor. A connection is returned to the pool only when its response
// was read completely and both sides allow keep-alive.
#include "net/common/error.hpp"
#include "net/common/io.hpp"
#include "net/common/response_head.hpp"

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

namespace pdr::upstream {

struct Endpoint {
    std::string host;  // DNS name, IPv4 literal, or IPv6 literal without brackets
    unsigned short port = 0;

    // "host:port", or "[v6]:port" for IPv6 literals (also the Host header value)
    std::string authority() const;
    bool operator==(const Endpoint&) const = default;
};

enum class Failure {
    None,
    Connect,          // resolve/connect refused or failed: the request was NOT sent (safe to retry)
    ConnectTimeout,   // connect did not finish in time: the request was NOT sent (safe to retry)
    Write,            // failed while sending the request
    ResponseTimeout,  // no complete response head (or body, for request()) in time
    IdleTimeout,      // a streaming body stalled longer than the idle timeout
    Read,             // connection closed or failed while reading the response
    Protocol,         // unparsable HTTP from upstream
    TooLarge,         // a whole body over PoolLimits::max_response_body (request() / read_all)
    Canceled,         // cancelled by the caller
};
std::string_view to_string(Failure f) noexcept;
// For logs and error messages: "connect (Connection refused)"; just the failure's name when the
// error adds nothing (none, a timeout, a cancel).
std::string describe(Failure f, const error_code& ec);
// What the client (or an admin caller) is told for a failure: upstream_connect_error,
// upstream_timeout, upstream_closed, upstream_protocol_error...
Errc errc_for(Failure f) noexcept;
// True for failures where the upstream never received the request.
inline bool request_not_sent(Failure f) noexcept {
    return f == Failure::Connect || f == Failure::ConnectTimeout;
}

struct Timeouts {
    Duration connect{3'000};
    Duration response{60'000};  // until the response head (request()) / whole answer (request())
    Duration idle{60'000};      // between two body reads of a ResponseStream
};

struct PoolLimits {
    std::size_t max_idle_per_endpoint = 64;
    Duration idle_ttl{30'000};                 // idle pooled connections older than this are closed
    std::size_t max_response_body = 64 << 20;  // request(), read_all(): bigger fail TooLarge
};

using Request = http::request<http::string_body>;

// A whole answer: its status and fields, and its body.
class Response : public wire::ResponseFields {
public:
    Response() = default;
    Response(wire::ResponseFields head, std::string body)
        : wire::ResponseFields(std::move(head)), body_(std::move(body)) {}
    std::string& body() noexcept { return body_; }
    const std::string& body() const noexcept { return body_; }

private:
    std::string body_;
};

// A request whose fields are serialized already: the router's legs build one with a few appends
// (no field tree, no serializer). The Client writes it as HTTP/1.1, adding Host (the endpoint's
// authority) and Content-Length (the body's size, where a request has one), each after
// `fields`, as Beast would for a Request. A Request is sent as one of these too.
struct PreparedRequest {
    http::verb method = http::verb::get;
    std::string target;
    std::string fields;  // "Name: value\r\n" lines: not Content-Length or the empty line
    std::string body;
    std::string request_id;  // the X-Request-Id value among `fields`, or empty
    bool keep_alive = true;  // false: `fields` ask for "Connection: close"
    bool has_host = false;   // `fields` hold Host: none is added

    // Appends "name: value\r\n" to `fields`.
    void add(std::string_view name, std::string_view value) {
        fields.append(name).append(": ").append(value).append("\r\n");
    }
    // The value of the first field `name` (case-insensitive) in `fields`; empty when none.
    std::string_view field(std::string_view name) const;
};

struct Result {
    Failure failure = Failure::None;
    error_code ec;      // the underlying error, for logs
    Response response;  // valid when failure == None (any HTTP status)
    bool ok() const noexcept { return failure == Failure::None; }
};

class ResponseStream;

class Client {
public:
    explicit Client(net::any_io_executor executor, PoolLimits limits = {});
    ~Client();
    Client(const Client&) = delete;
    Client& operator=(const Client&) = delete;

    // Sends `req` (Host and Content-Length are filled in) and reads the whole answer.
    awaitable<Result> request(const Endpoint& ep, Request req, Timeouts t);
    awaitable<Result> request(const Endpoint& ep, PreparedRequest req, Timeouts t);

    // Sends `req` and reads only the response head; the body is then read piece by piece from
    // the returned stream as upstream sends it (chunked encoding decoded). On failure the
    // pointer is null and `failure`/`ec` say why.
    struct Opened {
        Failure failure = Failure::None;
        error_code ec;
        std::unique_ptr<ResponseStream> stream;
    };
    awaitable<Opened> open(const Endpoint& ep, Request req, Timeouts t);
    awaitable<Opened> open(const Endpoint& ep, PreparedRequest req, Timeouts t);

    // Closes idle pooled connections (all endpoints, or one).
    void close_idle();
    // Closes the idle connections that are past PoolLimits::idle_ttl or that the peer has
    // closed (otherwise they are only noticed when the pool is next used for their endpoint).
    // Returns how many were closed.
    std::size_t sweep_idle();
    void close_idle(const Endpoint& ep);
    std::size_t idle_connections() const noexcept;
    // Ends now the exchanges with `ep` whose caller waits on it and that have received nothing
    // from it for at least `quiet` (an upstream found stopped or hung by other means, e.g. a
    // failed health probe). Each fails as its own timeout would: Failure::ResponseTimeout
    // before the answer's head (request(), open()), IdleTimeout in a streamed body. Exchanges
    // still receiving, and streams whose caller is busy elsewhere, go on. Returns how many ended.
    std::size_t fail_stalled(const Endpoint& ep, Duration quiet);

    struct Impl;

private:
    std::shared_ptr<Impl> impl_;
};

class ResponseStream {
public:
    virtual ~ResponseStream() = default;
    virtual const wire::ResponseFields& head() const = 0;
    unsigned status() const { return head().result_int(); }

    // Appends the next piece of the body to `out` (waits at most Timeouts::idle for it).
    // Returns Failure::None with done() true once the body is complete.
    virtual awaitable<Failure> read_some(std::string& out) = 0;
    virtual bool done() const = 0;
    // True when body bytes (or the end of the body) are already here: the next read_some
    // answers without waiting for the network.
    virtual bool body_buffered() const { return false; }

    // Reads the rest of the body into `out` (bounded by PoolLimits::max_response_body).
    virtual awaitable<Failure> read_all(std::string& out) = 0;

    // Closes the connection now; a pending read_some completes with Failure::Canceled.
    virtual void cancel() = 0;
};

}  // namespace pdr::upstream
