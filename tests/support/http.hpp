#pragma once
// A small blocking HTTP/1.1 client on raw loopback sockets, for tests: exact bytes on the wire,
// incremental reads with arrival times (streaming tests), abrupt closes (disconnect tests).
#include <nlohmann/json.hpp>

#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include "tests/support/process.hpp"
#include "tests/support/sse.hpp"

namespace pdr::test {

using Clock = std::chrono::steady_clock;
using Headers = std::vector<std::pair<std::string, std::string>>;

struct HttpResponse {
    int status = 0;     // 0: no response (see error)
    std::string error;  // transport/parse problem, empty when the response is complete
    Headers headers;    // names lower-cased, in arrival order
    std::string body;   // de-chunked
    bool chunked = false;
    bool complete = false;  // framing finished (or EOF for close-delimited bodies)

    std::string header(std::string_view name) const;  // "" when absent
    bool has_header(std::string_view name) const;
    nlohmann::json json() const;   // discarded (is_discarded()) when not JSON
    std::string describe() const;  // status + body (truncated), for assertion messages
};

// Incremental response parser.
class ResponseParser {
public:
    // Feeds bytes; returns false on a framing error (sets response().error).
    bool feed(std::string_view data);
    // The peer closed the connection.
    void eof();
    bool head_done() const noexcept { return head_done_; }
    bool done() const noexcept { return response_.complete; }
    HttpResponse& response() noexcept { return response_; }

private:
    bool parse_head();
    bool parse_body();
    std::string buf_;
    bool head_done_ = false;
    long long content_length_ = -1;
    long long chunk_left_ = -1;  // -1: expecting a chunk-size line
    bool in_trailer_ = false;
    HttpResponse response_;
};

// One client connection to 127.0.0.1:port.
class Connection {
public:
    Connection() = default;
    ~Connection();
    Connection(Connection&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
    Connection& operator=(Connection&& o) noexcept;
    Connection(const Connection&) = delete;
    Connection& operator=(const Connection&) = delete;

    bool connect(unsigned short port, std::string& error);
    bool write_all(std::string_view data, std::string& error);
    // Reads what is available, waiting up to `deadline`. Returns bytes read; 0 with eof=true
    // when the peer closed; 0 with timed_out=true when the deadline passed.
    std::string read_some(Clock::time_point deadline, bool& eof, bool& timed_out,
                          std::string& error);
    // Closes with RST (SO_LINGER 0) when `abort`, else a normal close.
    void close(bool abort = false);
    bool is_open() const noexcept { return fd_ >= 0; }

private:
    int fd_ = -1;
};

struct HttpRequest {
    std::string method = "GET";
    std::string target = "/";
    Headers headers;  // sent as given; Host/Content-Length/Connection added when absent
    std::string body;
};

// Serializes a request (adds Host, Content-Length for non-empty bodies or POST, Connection: close).
std::string serialize(const HttpRequest& req);

// Sends one request on a fresh connection and reads the whole response.
HttpResponse http_request(unsigned short port, const HttpRequest& req, Ms timeout = Ms{10000});
HttpResponse http_get(unsigned short port, const std::string& target, const Headers& headers = {},
                      Ms timeout = Ms{10000});
HttpResponse http_post(unsigned short port, const std::string& target, const std::string& body,
                       const Headers& headers = {}, Ms timeout = Ms{10000},
                       const std::string& content_type = "application/json");
HttpResponse http_post_json(unsigned short port, const std::string& target,
                            const nlohmann::json& body, const Headers& headers = {},
                            Ms timeout = Ms{10000});
// Sends `req` on an open connection (keep-alive: pass "Connection: keep-alive" in the headers)
// and reads exactly one response.
HttpResponse http_exchange(Connection& c, const HttpRequest& req, Ms timeout = Ms{10000});
// Sends raw bytes and reads one response.
HttpResponse http_raw(unsigned short port, const std::string& raw, Ms timeout = Ms{10000});

// A streamed response with the arrival time of every piece of body.
struct TimedResponse {
    HttpResponse response;
    Clock::time_point sent;
    Clock::time_point head_at;
    Clock::time_point first_event_at;  // first complete "data: ..." SSE event in the body
    Clock::time_point end_at;          // body complete or connection closed
    bool saw_first_event = false;
    bool closed_by_peer = false;
};
TimedResponse http_request_timed(unsigned short port, const HttpRequest& req,
                                 Ms timeout = Ms{20000});

double ms_between(Clock::time_point a, Clock::time_point b);

}  // namespace pdr::test
