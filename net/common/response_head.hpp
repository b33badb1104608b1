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
#include <boost/beast/http/field.hpp>
#include <boost/system/error_code.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>
#include <utility>
#include <vector>

namespace pdr::wire {

// One field of a parsed head (the names of Beast's field accessors, so the lookups of
// net/common/fields.hpp work on both).
class HeadField {
public:
    boost::beast::http::field name() const noexcept { return code_; }
    std::string_view name_string() const noexcept { return name_; }
    std::string_view value() const noexcept { return value_; }

private:
    friend struct HeadBuilder;
    HeadField(boost::beast::http::field code, std::string_view name, std::string_view value)
        : code_(code), name_(name), value_(value) {}
    boost::beast::http::field code_;
    std::string_view name_;
    std::string_view value_;
};

// An answer's status, version and fields, in their order, with views into one copy of the
// head's bytes (on the heap: a move keeps the views valid). Two allocations a head, where
// Beast's field tree made one per field and a lookup walked a tree.
class ResponseFields {
public:
    using value_type = HeadField;
    using const_iterator = std::vector<HeadField>::const_iterator;

    ResponseFields() = default;
    ResponseFields(const ResponseFields& other);
    ResponseFields& operator=(const ResponseFields& other);
    ResponseFields(ResponseFields&&) noexcept = default;
    ResponseFields& operator=(ResponseFields&&) noexcept = default;
    ~ResponseFields() = default;

    unsigned result_int() const noexcept { return status_; }
    unsigned version() const noexcept { return version_; }
    const_iterator begin() const noexcept { return fields_.begin(); }
    const_iterator end() const noexcept { return fields_.end(); }
    // The value of the first field `name` (a name: case-insensitive); empty when there is none.
    std::string_view operator[](boost::beast::http::field name) const noexcept;
    std::string_view operator[](std::string_view name) const noexcept;

    // A head with these fields, as if parsed (tests and fakes).
    static ResponseFields make(unsigned status,
                               std::vector<std::pair<std::string_view, std::string_view>> fields,
                               unsigned version = 11);

private:
    friend struct HeadBuilder;
    std::unique_ptr<char[]> text_;  // the head's bytes the views point into
    std::size_t size_ = 0;
    std::vector<HeadField> fields_;
    unsigned status_ = 0;
    unsigned version_ = 11;
};

// How an answer's body ends (RFC 9112 6.3).
enum class BodyEnd : std::uint8_t {
    None,     // no body: HEAD, 1xx, 204, 304, or a length of 0
    Length,   // after `ResponseHead::length` bytes
    Chunked,  // after its last chunk and trailers
    ToEof,    // when the upstream closes the connection
};

struct ResponseHead {
    ResponseFields fields;  // status, version and fields (the reason phrase is checked, not kept)
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
