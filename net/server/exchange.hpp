#pragma once
// The server's Exchange (internal to net/server): one request's answer on its Connection, as a
// whole response or as a stream (chunked, or plain to an HTTP/1.0 client) whose head may be held
// for the first chunk; and what a client that goes away, or the end of a shutdown's grace, does
// to it.
#include "net/server/connection.hpp"

#include <array>
#include <optional>
#include <string>
#include <string_view>

namespace pdr::server::detail {

class ExchangeImpl final : public Exchange {
public:
    ExchangeImpl(Connection& c, Request req) : conn_(c), req_(std::move(req)) {}

    const Request& request() const override { return req_; }
    std::string remote_address() const override;

    awaitable<error_code> respond(Response res) override;
    awaitable<error_code> begin_stream(http::response<http::empty_body> head) override;
    awaitable<error_code> begin_stream_held(http::response<http::empty_body> head) override;
    awaitable<error_code> write_chunk(std::string_view data) override;
    std::optional<awaitable<error_code>> write_chunk_or_rest(std::string_view data,
                                                             error_code& ec) override;
    std::optional<awaitable<error_code>> write_last_chunk_or_rest(std::string_view data,
                                                                  error_code& ec) override;
    awaitable<error_code> end_stream() override;

    void set_request_id(std::string id) override { request_id_ = std::move(id); }
    void abort() override;

    bool responded() const override { return responded_; }
    bool client_gone() const override { return gone_; }

    // The client went away (EOF/error seen by the watcher, or a failed write).
    void mark_gone() noexcept { gone_ = true; }

    bool reusable() const { return complete_ && keep_alive_ && !gone_ && !aborted_; }

    // The shutdown grace is over with this exchange still running: the client is told (a 503
    // when nothing was sent yet; an SSE error event when a stream is under way and no write is
    // half done), best effort without waiting; the connection is closed and the handler
    // cancelled (its upstream legs with it).
    ShutdownCut cut_for_shutdown();

private:
    // Checks and marks the start of a stream and puts its head's bytes in conn_.head_buf.
    error_code start_stream(http::response<http::empty_body>& head);
    // One gather write: the held head (if any), the chunk of `data` (if not empty) and, with
    // `last`, the end of the body. Sent now when the socket takes it all; otherwise returns
    // what sends the rest.
    std::optional<awaitable<error_code>> send_chunk_or_rest(std::string_view data, bool last,
                                                            error_code& ec);
    std::array<net::const_buffer, 5> chunk_buffers(std::string_view data) const;
    // The part of a chunk that did not go out at once (the socket's buffer was full).
    awaitable<error_code> send_chunk_rest(std::string_view data, std::size_t sent);
    void sent_all(const error_code& ec);
    void failed_write(const error_code& ec);

    Connection& conn_;
    Request req_;
    bool responded_ = false;
    bool streaming_ = false;
    bool plain_ = false;  // a stream to an HTTP/1.0 client: no chunk framing, ends at the close
    bool complete_ = false;
    bool keep_alive_ = false;
    bool gone_ = false;
    bool aborted_ = false;
    bool writing_ = false;      // a chunk is half sent (its rest is being written)
    bool head_held_ = false;    // begin_stream_held: the head waits for the first write
    bool last_ = false;         // the write under way ends the body
    bool at_event_end_ = true;  // the last chunk ended with a blank line (an SSE event's end)
    std::string request_id_;    // for answers the server makes itself (see set_request_id)
    char size_line_[24];        // the current chunk's size line (lives until its rest is sent)
    std::size_t size_line_len_ = 0;
};

}  // namespace pdr::server::detail
