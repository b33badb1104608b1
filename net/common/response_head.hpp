#pragma once
// The head of an upstream's HTTP/1.x answer (RFC 9112 4-6), parsed in one pass once it is whole,
// and how its body ends. Beast's parser did this at about 4,000 instructions a head, most of
// them its general machinery (a state machine that can stop at any byte, a field-name lookup
// and checks per byte); an upstream's head arrives whole in one read nearly always.
//
// The grammar is RFC 9112's, at least as strict as Beast's, and stricter where a proxy must be:
//   status-line  = "HTTP/1." ( "0" / "1" ) SP 3DIGIT SP *( HTAB / SP / VCHAR / obs-text ) CRLF
//   field-line   = token ":" OWS *( HTAB / SP / VCHAR / obs-text ) OWS CRLF
// Every line ends in CRLF: a bare LF or a CR not followed by LF fails at once (Beast would wait
// for a line end that never comes). A line that cannot become valid fails before it ends. A line
// that starts with SP or HTAB (an obsolete folded line, RFC 9112 5.2) fails: Beast unfolds it. The
// body's framing (RFC 9112 6.3): none for an answer to HEAD and for 1xx, 204 and 304; else
// "Transfer-Encoding: chunked" (exactly that: one field, one coding, which is all the router can
// relay) or Content-Length (digits; repeated only with the same value, as one field's list or
// several fields); else until the connection closes. Content-Length and Transfer-Encoding together
// fail, as does any other transfer coding. Errors are Beast's http::error codes, so callers
// classify them as before. No I/O.
#include <boost/beast/http/message.hpp>
#include <boost/system/error_code.hpp>

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace pdr::wire {

// How an answer's body ends (RFC 9112 6.3).
enum class BodyEnd : std::uint8_t {
    None,     // no body: HEAD, 1xx, 204, 304, or a length of 0
    Length,   // after `ResponseHead::length` bytes
    Chunked,  // after its last chunk and trailers
    ToEof,    // when the upstream closes the connection
};

struct ResponseHead {
    boost::beast::http::response_header<> fields;  // status, reason, version and fields
    BodyEnd body = BodyEnd::None;
    std::uint64_t length = 0;  // BodyEnd::Length
    // The upstream keeps the connection open after this answer: HTTP/1.1 without a "close"
    // option in Connection, HTTP/1.0 with a "keep-alive" one (RFC 9112 9.3).
    bool keep_alive = false;
};

enum class HeadParse : std::uint8_t { NeedMore, Done, Failed };

// Parses the head at the front of `in` once its end (an empty line) is there. Done: `out` holds
// it and `used` its length (the body's bytes follow). NeedMore: the head is not whole yet and
// nothing wrong was seen (`in` stays as it is; call again with more bytes after it). Failed:
// `ec` says why; a head not ended within `max_head` bytes fails with http::error::header_limit.
// `head_request`: the answer is to a HEAD request (no body, whatever its fields say).
HeadParse parse_response_head(std::string_view in, std::size_t max_head, bool head_request,
                              ResponseHead& out, std::size_t& used, boost::system::error_code& ec);

}  // namespace pdr::wire
