#pragma once
// Reading one request off a Connection, and the HTTP/1.1 conformance around it (RFC 9112): blank
// lines before a request line, versions Beast does not take, Transfer-Encoding, 100-continue,
// the header and body limits; and the error answers for what the server refuses before a
// handler sees it. Internal to net/server.
#include "net/server/connection.hpp"

#include <cstddef>
#include <optional>
#include <string_view>

namespace pdr::server::detail {

// RFC 9112 2.2: empty lines before a request line are ignored (some clients send a CRLF after a
// POST body). They count toward the read deadline of the request they precede, which starts
// with the first of them: a blank line now and then does not keep a connection open.
struct Preamble {
    std::size_t blank = 0;                      // blank-line bytes since the last request
    std::optional<Clock::time_point> deadline;  // set by the first of them
};
enum class BlankLines {
    None,     // what is buffered starts a request
    Only,     // only blank lines so far: wait for more bytes, until pre.deadline
    TooMany,  // more blank bytes than the header limit: a malformed request
};
// Drops the CR and LF bytes at the front of conn.buffer, counting them in `pre`.
BlankLines skip_blank_lines(Connection& conn, Preamble& pre);

// Reads the request whose first bytes are in conn.buffer, head and body, by `deadline`.
// Nothing when the connection must close: a request the server refuses has been answered
// (400, 413, 431, 505) by then; a client that went away, or a timeout, has not.
awaitable<std::optional<Request>> read_request(Connection& conn, Clock::time_point deadline);

// Answers a request the server refuses itself (an OpenAI error body, `Connection: close`), then
// lingers a moment reading what the client still sends so that the close does not reset the
// connection before the client reads the answer. `head`: the request's head when it was read
// (its X-Request-Id, if sane, is answered back, as for every other answer); else a fresh id.
awaitable<void> refuse(Connection& conn, Errc e, std::string_view message, unsigned version,
                       const Request* head = nullptr);

}  // namespace pdr::server::detail
