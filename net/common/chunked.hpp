#pragma once
// The chunked framing of an upstream answer's body (RFC 9112 7.1), undone as bytes arrive: the
// chunk data is appended to the caller's string with no copy in between, and only the framing
// is looked at byte by byte (a chunk-size line is a few bytes; a stream event is one chunk).
// Beast's parser did this for the streamed legs at about 900 instructions per event, most of
// them its general machinery, and through a body buffer copied once more.
//
// The grammar is RFC 9112's, as strict as Beast's: 1*HEXDIG chunk sizes (64-bit), extensions
// (token names, token or quoted-string values, BWS around ";" and "="), CRLF after each size
// line and each chunk's data, and a trailer section of "name: value" lines (token names, no
// folded lines), read and dropped. Where Beast waits, this fails at once: a bare LF or a CR
// that is not followed by LF (Beast never ends such a line), and a framing line or trailer
// section that is already over its limit or can no longer be valid. The decoder stops at the
// end of the body: bytes after it are left to the caller. No I/O.
#include <boost/system/error_code.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace pdr::wire {

class ChunkedDecoder {
public:
    // A framing line (a chunk-size line with its extensions, CRLF included) or the trailer
    // section (with its empty line) may be at most this long: past it the body fails with
    // http::error::buffer_overflow, whether the bytes came whole or one at a time.
    explicit ChunkedDecoder(std::size_t max_framing) noexcept : max_framing_(max_framing) {}

    // Decodes from the front of `in`: appends chunk data to `out` and returns how many bytes of
    // `in` it used. A framing line is used only once it is whole, so what is left over starts
    // with the rest of a line (keep it and call again with more bytes after it), the end of the
    // body has been reached (done()), or `ec` is set (a malformed body: an http::error).
    std::size_t decode(std::string_view in, std::string& out, boost::system::error_code& ec);

    bool done() const noexcept { return state_ == State::Done; }
    // True once the size line of the last chunk ("0") has been read: what remains is the trailer
    // section.
    bool in_trailer() const noexcept { return state_ == State::Trailer || done(); }

private:
    enum class State { Size, Data, DataCr, DataLf, Trailer, Done };
    enum class Line : std::uint8_t;  // where a framing line's scan stands (chunked.cpp)

    // Scans the current framing line from where the last call stopped. Returns the length of
    // the line (with its CRLF) once whole, or 0 when more bytes are needed.
    std::size_t scan_size_line(std::string_view in, boost::system::error_code& ec);
    std::size_t scan_trailer_line(std::string_view in, boost::system::error_code& ec);
    void expect_size_line() noexcept;  // after a chunk's CRLF: the next size line

    std::size_t max_framing_;
    State state_ = State::Size;
    Line line_{};              // the scan of the framing line being read
    std::size_t scanned_ = 0;  // bytes of it scanned so far (left in the caller's buffer)
    std::uint64_t size_ = 0;   // the chunk size read so far
    std::uint64_t left_ = 0;   // data bytes of the current chunk still to come
    std::size_t trailer_ = 0;  // bytes of the trailer section read so far
};

}  // namespace pdr::wire
