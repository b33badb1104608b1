#pragma once
// Internals of upstream::Client (not a public header): pooled connections and failure
// classification shared by client.cpp and response_stream.cpp.
#include "net/common/chunked.hpp"
#include "net/common/deadline.hpp"
#include "net/upstream/client.hpp"

#include <array>
#include <unordered_map>
#include <vector>

namespace pdr::upstream::detail {

struct Conn;

// The connections out of the pool for an exchange, where Client::fail_stalled finds them. Shared
// with them, so a connection that outlives its Client still takes itself off.
struct BusyList {
    std::vector<Conn*> conns;
};

struct Conn {
    explicit Conn(const net::any_io_executor& ex);
    ~Conn();
    Conn(const Conn&) = delete;
    Conn& operator=(const Conn&) = delete;
    // Reads go to stream.socket() under `deadline` (no per-read timer); Beast's own timer is
    // used only for connects and for writes that did not go out at once (wire::send_or_rest).
    beast::tcp_stream stream;
    Deadline deadline;          // on expiry the socket is closed: the pending read ends at once
    beast::flat_buffer buffer;  // kept with the connection (holds read-ahead bytes)
    Clock::time_point idle_since{};
    std::string head_buf;  // scratch for the serialized request head
    // The request's head and body as one gather write: kept here, since a write that did not go
    // out at once finishes in an awaitable that refers to them.
    std::array<net::const_buffer, 2> request_buffers;
    std::string key;  // the endpoint's authority (its pool's key)
    // Since when the exchange has waited on the upstream with nothing arriving: its start, the
    // last bytes received, or (a streamed body) the start of the current read; max() while the
    // caller is not waiting on it (between two reads of a streamed body).
    Clock::time_point quiet_since = Clock::time_point::max();

    // Out of the pool for an exchange: on `list` until set_idle() or destruction.
    void set_busy(const std::shared_ptr<BusyList>& list);
    void set_idle() noexcept;

private:
    std::shared_ptr<BusyList> busy_;  // set while busy
    std::size_t busy_at_ = 0;         // its place in busy_->conns
};
using ConnPtr = std::unique_ptr<Conn>;

// An operation's error, with the close done by an expired Conn::deadline reported as a timeout.
inline error_code io_error(const Conn& c, const error_code& ec) noexcept {
    return ec && c.deadline.expired() ? error_code(beast::error::timeout) : ec;
}

}  // namespace pdr::upstream::detail

namespace pdr::upstream {

struct Client::Impl {
    Impl(net::any_io_executor ex, PoolLimits l) : executor(std::move(ex)), limits(l) {}
    ~Impl();

    net::any_io_executor executor;
    PoolLimits limits;
    std::unordered_map<std::string, std::vector<detail::ConnPtr>> idle;  // by authority
    std::size_t idle_count = 0;
    std::shared_ptr<detail::BusyList> busy = std::make_shared<detail::BusyList>();

    // Newest idle connection that still looks alive, or null.
    detail::ConnPtr take(const std::string& key);
    // Returns a connection whose response was fully read and that allows keep-alive.
    void give_back(const std::string& key, detail::ConnPtr c);
    void close_all();
    void close_key(const std::string& key);
    std::size_t sweep();
    std::size_t fail_stalled(const std::string& key, Duration quiet);

    // Connects `c` to `ep` under `t.connect`.
    awaitable<std::pair<Failure, error_code>> connect(detail::Conn& c, const Endpoint& ep,
                                                      const Timeouts& t);
};

namespace detail {

inline constexpr std::uint32_t kMaxResponseHeader = 64 * 1024;

bool is_stale_error(const error_code& ec) noexcept;
// A status an upstream may end an exchange with. Not 1xx: nothing the router sends asks for an
// interim answer (no Expect, no Upgrade), so one is a broken upstream, as is anything outside
// 200-599 (a protocol failure, never relayed to the client as the answer). Nor 204, 205 or 304:
// answers without a body to a completion or a probe (and the router never asks conditionally);
// relayed, a stream would get a chunked body a client must not expect.
bool final_status(unsigned status) noexcept;
// False when the answer names another request: both carry X-Request-Id and the two differ (an
// engine that echoes the id, as vLLM does with --enable-request-id-headers and pdsim always
// does). Such an answer was meant for an earlier request on the same connection: an upstream
// that wrote more than one answer to one request. The connection is closed, the exchange fails.
bool answers_request(const PreparedRequest& req, const wire::ResponseFields& head) noexcept;
// False for an answer the router cannot relay as it is: a Content-Encoding other than identity
// (the router sends no Accept-Encoding, and drops the header when relaying), or a
// Transfer-Encoding other than one "chunked" (only the chunking is undone).
bool plain_coding(const wire::ResponseFields& head) noexcept;
Failure classify_write(const error_code& ec) noexcept;
Failure classify_read(const error_code& ec, Failure on_timeout) noexcept;

// The stream returned by Client::open(), and the reader under Client::request(). It owns the
// connection until the body is complete (then the connection goes back to the pool when
// keep-alive allows) or it is destroyed.
//
// The head is parsed by wire::parse_response_head; the body's framing (a length, chunks, or the
// connection's end) is undone here, from the connection's buffer straight into the caller's
// string.
class StreamImpl final : public ResponseStream {
public:
    static constexpr std::size_t kBufferSize = 16 * 1024;  // read_all's growth step

    // `whole_exchange`: Timeouts::response bounds the head and the whole body (Client::request);
    // otherwise each body read is bounded by Timeouts::idle (a streamed body).
    StreamImpl(std::weak_ptr<Client::Impl> pool, std::string key, ConnPtr conn, const Timeouts& t,
               bool keep_alive, bool head_request, std::size_t max_body,
               bool whole_exchange = false);
    ~StreamImpl() override;

    // Reads the response head under Timeouts::response.
    awaitable<std::pair<Failure, error_code>> read_head();
    bool got_some() const noexcept { return got_some_; }

    const wire::ResponseFields& head() const override { return head_.fields; }
    wire::ResponseFields& head() { return head_.fields; }
    awaitable<Failure> read_some(std::string& out) override;
    bool done() const override { return done_; }
    bool body_buffered() const override {
        return done_ || head_.body == wire::BodyEnd::None || (conn_ && conn_->buffer.size() > 0);
    }
    awaitable<Failure> read_all(std::string& out) override;
    // The whole body into `out` when it is buffered already (the usual case for a short answer
    // that came with its head), without a coroutine; false (nothing taken) when it is not.
    bool take_whole_body(std::string& out);
    void cancel() override;
    // The error under the last failure of read_some() or read_all(), for logs.
    const error_code& error() const noexcept { return error_; }

private:
    // Body bytes buffered on the connection, appended to `out`; true when the body is complete.
    bool take_buffered(std::string& out, error_code& ec);
    void finish();  // body complete: pool or close the connection
    void drop();    // close the connection

    std::weak_ptr<Client::Impl> pool_;
    std::string key_;
    ConnPtr conn_;
    Timeouts timeouts_;
    bool keep_alive_;
    bool head_request_;
    bool whole_exchange_;
    std::size_t max_body_;
    wire::ResponseHead head_;
    std::uint64_t length_left_ = 0;  // BodyEnd::Length: bytes still to come
    wire::ChunkedDecoder chunked_;   // BodyEnd::Chunked
    bool got_some_ = false;          // a byte of the answer arrived
    bool done_ = false;
    bool canceled_ = false;
    Failure deferred_ = Failure::None;  // an error that follows body bytes already passed on
    error_code error_;
    bool closed_ = false;
};

}  // namespace detail

}  // namespace pdr::upstream
