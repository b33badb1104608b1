#include "net/common/chunked.hpp"

#include <boost/beast/http/error.hpp>

#include <algorithm>
#include <cstring>
#include <limits>

namespace pdr::wire {

namespace http = boost::beast::http;

// Where the scan of a framing line stands: after which part of the grammar.
//   chunk-size-line = 1*HEXDIG *( BWS ";" BWS name [ BWS "=" BWS value ] ) CRLF
//   trailer line    = token ":" *( HTAB / SP / VCHAR / obs-text ) CRLF; the section ends at an
//                     empty line
enum class ChunkedDecoder::Line : std::uint8_t {
    SizeFirst,      // nothing yet: a hex digit must come
    Size,           // in the hex digits
    BwsBeforeSemi,  // whitespace after the size or a value: only ";" may follow
    AfterSemi,      // ";" and whitespace: an extension name must come
    Name,           // in an extension name
    AfterName,      // whitespace after a name: "=" or ";"
    AfterEquals,    // "=" and whitespace: a token or a quoted string
    Token,          // in a token value
    Quoted,         // in a quoted string
    QuotedPair,     // after a backslash in a quoted string
    AfterQuoted,    // after a quoted string's closing quote
    SizeCr,         // the size line's CR: LF must come
    TrailerFirst,   // a trailer line's first byte: a name, or CR for the empty line
    TrailerName,
    TrailerValue,
    TrailerCr,
    EmptyCr,  // the trailer section's empty line: LF must come
};

namespace {

bool is_hex(unsigned char c, unsigned& v) noexcept {
    if (c >= '0' && c <= '9') {
        v = c - '0';
        return true;
    }
    c |= 0x20;
    if (c >= 'a' && c <= 'f') {
        v = c - 'a' + 10;
        return true;
    }
    return false;
}

// tchar (RFC 9110 5.6.2): ALPHA, DIGIT and !#$%&'*+-.^_`|~
bool is_tchar(unsigned char c) noexcept {
    if ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') {
        return true;
    }
    if (c >= '0' && c <= '9') {
        return true;
    }
    return c != 0 && std::strchr("!#$%&'*+-.^_`|~", c) != nullptr;
}

bool is_ws(unsigned char c) noexcept {
    return c == ' ' || c == '\t';
}

// qdtext (RFC 9110 5.6.4): HTAB, SP, %x21, %x23-5B, %x5D-7E, obs-text
bool is_qdtext(unsigned char c) noexcept {
    return is_ws(c) || c == 0x21 || (c >= 0x23 && c <= 0x5b) || (c >= 0x5d && c <= 0x7e) ||
           c >= 0x80;
}

// What a quoted-pair may quote, and a field value's bytes: HTAB, SP, VCHAR, obs-text.
bool is_field_char(unsigned char c) noexcept {
    return is_ws(c) || (c >= 0x21 && c != 0x7f);
}

}  // namespace

std::size_t ChunkedDecoder::scan_size_line(std::string_view in, boost::system::error_code& ec) {
    using L = Line;
    if (scanned_ == 0) {
        // The common line, whole: up to 16 hex digits (no overflow) and CRLF. Anything else
        // (extensions, leading zeros past 16 digits, a line not yet whole) is scanned below.
        std::size_t i = 0;
        std::uint64_t size = 0;
        unsigned digit = 0;
        while (i < in.size() && i < 16 && is_hex(static_cast<unsigned char>(in[i]), digit)) {
            size = size * 16 + digit;
            ++i;
        }
        if (i > 0 && i + 1 < in.size() && in[i] == '\r' && in[i + 1] == '\n') {
            size_ = size;
            return i + 2;
        }
    }
    while (scanned_ < in.size()) {
        if (scanned_ >= max_framing_) {  // whole or not, a line over the limit fails
            ec = http::error::buffer_overflow;
            return 0;
        }
        const auto c = static_cast<unsigned char>(in[scanned_++]);
        if (c == '\n') {  // ends the line after its CR; a bare LF never does
            if (line_ != L::SizeCr) {
                ec = http::error::bad_line_ending;
                return 0;
            }
            return scanned_;
        }
        if (c == '\r' && line_ != L::SizeCr) {
            // The line may end after the size, a name, a value: not after whitespace, ";",
            // "=", or inside a quoted string (where a CR is not allowed at all).
            if (line_ == L::Size || line_ == L::Name || line_ == L::Token ||
                line_ == L::AfterQuoted) {
                line_ = L::SizeCr;
                continue;
            }
            ec = line_ == L::SizeFirst ? http::error::bad_chunk : http::error::bad_chunk_extension;
            return 0;
        }
        unsigned digit = 0;
        bool ok = true;
        switch (line_) {
            case L::SizeFirst:
            case L::Size:
                if (is_hex(c, digit)) {
                    if (size_ > std::numeric_limits<std::uint64_t>::max() / 16) {
                        ec = http::error::bad_chunk;  // a size that does not fit 64 bits
                        return 0;
                    }
                    size_ = size_ * 16 + digit;
                    line_ = L::Size;
                } else if (line_ == L::SizeFirst) {
                    ec = http::error::bad_chunk;
                    return 0;
                } else if (is_ws(c)) {
                    line_ = L::BwsBeforeSemi;
                } else {
                    ok = c == ';';
                    line_ = L::AfterSemi;
                }
                break;
            case L::BwsBeforeSemi:
                if (!is_ws(c)) {
                    ok = c == ';';
                    line_ = L::AfterSemi;
                }
                break;
            case L::AfterSemi:
                if (!is_ws(c)) {
                    ok = is_tchar(c);
                    line_ = L::Name;
                }
                break;
            case L::Name:
            case L::AfterName:
                if (is_ws(c)) {
                    line_ = L::AfterName;
                } else if (c == ';') {
                    line_ = L::AfterSemi;
                } else if (c == '=') {
                    line_ = L::AfterEquals;
                } else {
                    ok = line_ == L::Name && is_tchar(c);
                }
                break;
            case L::AfterEquals:
                if (c == '"') {
                    line_ = L::Quoted;
                } else if (!is_ws(c)) {
                    ok = is_tchar(c);
                    line_ = L::Token;
                }
                break;
            case L::Token:
            case L::AfterQuoted:
                if (is_ws(c)) {
                    line_ = L::BwsBeforeSemi;
                } else if (c == ';') {
                    line_ = L::AfterSemi;
                } else {
                    ok = line_ == L::Token && is_tchar(c);
                }
                break;
            case L::Quoted:
                if (c == '"') {
                    line_ = L::AfterQuoted;
                } else if (c == '\\') {
                    line_ = L::QuotedPair;
                } else {
                    ok = is_qdtext(c);
                }
                break;
            case L::QuotedPair:
                ok = is_field_char(c);
                line_ = L::Quoted;
                break;
            case L::SizeCr:
                ec = http::error::bad_line_ending;  // a CR not followed by LF
                return 0;
            default:
                ok = false;
                break;
        }
        if (!ok) {
            ec = http::error::bad_chunk_extension;
            return 0;
        }
    }
    return 0;
}

std::size_t ChunkedDecoder::scan_trailer_line(std::string_view in, boost::system::error_code& ec) {
    using L = Line;
    while (scanned_ < in.size()) {
        if (trailer_ + scanned_ >= max_framing_) {  // the section, this line included
            ec = http::error::buffer_overflow;
            return 0;
        }
        const auto c = static_cast<unsigned char>(in[scanned_++]);
        switch (line_) {
            case L::TrailerFirst:
                if (c == '\r') {
                    line_ = L::EmptyCr;
                } else if (is_tchar(c)) {
                    line_ = L::TrailerName;
                } else {
                    // A folded line (SP or HTAB first), an empty name, a bare LF.
                    ec = c == '\n' ? http::error::bad_line_ending : http::error::bad_field;
                    return 0;
                }
                break;
            case L::TrailerName:
                if (c == ':') {
                    line_ = L::TrailerValue;
                } else if (!is_tchar(c)) {
                    ec = c == '\n' || c == '\r' ? http::error::bad_line_ending
                                                : http::error::bad_field;
                    return 0;
                }
                break;
            case L::TrailerValue:
                if (c == '\r') {
                    line_ = L::TrailerCr;
                } else if (!is_field_char(c)) {
                    ec = c == '\n' ? http::error::bad_line_ending : http::error::bad_value;
                    return 0;
                }
                break;
            case L::TrailerCr:
            case L::EmptyCr:
                if (c != '\n') {
                    ec = http::error::bad_line_ending;
                    return 0;
                }
                return scanned_;
            default:
                ec = http::error::bad_field;
                return 0;
        }
    }
    return 0;
}

void ChunkedDecoder::expect_size_line() noexcept {
    state_ = State::Size;
    line_ = Line::SizeFirst;
    size_ = 0;
}

std::size_t ChunkedDecoder::decode(std::string_view in, std::string& out,
                                   boost::system::error_code& ec) {
    ec = {};
    std::size_t at = 0;
    while (at < in.size()) {
        switch (state_) {
            case State::Size: {
                const std::size_t line = scan_size_line(in.substr(at), ec);
                if (line == 0) {
                    return at;  // more bytes needed, or ec
                }
                at += line;
                scanned_ = 0;
                if (size_ == 0) {
                    state_ = State::Trailer;
                    line_ = Line::TrailerFirst;
                } else {
                    state_ = State::Data;
                    left_ = size_;
                }
                break;
            }
            case State::Data: {
                const auto n =
                    static_cast<std::size_t>(std::min<std::uint64_t>(left_, in.size() - at));
                out.append(in.data() + at, n);
                at += n;
                left_ -= n;
                if (left_ == 0) {
                    state_ = State::DataCr;
                }
                break;
            }
            case State::DataCr:
            case State::DataLf:
                if (state_ == State::DataCr && in.size() - at >= 2 && in[at] == '\r' &&
                    in[at + 1] == '\n') {
                    at += 2;  // the common case: the chunk's CRLF whole
                    expect_size_line();
                    break;
                }
                if (in[at] != (state_ == State::DataCr ? '\r' : '\n')) {
                    ec = http::error::bad_chunk;  // chunk data not followed by CRLF
                    return at;
                }
                ++at;
                if (state_ == State::DataCr) {
                    state_ = State::DataLf;
                } else {
                    expect_size_line();
                }
                break;
            case State::Trailer: {
                const std::size_t line = scan_trailer_line(in.substr(at), ec);
                if (line == 0) {
                    return at;
                }
                at += line;
                trailer_ += line;
                if (line_ == Line::EmptyCr) {
                    state_ = State::Done;
                    return at;
                }
                scanned_ = 0;
                line_ = Line::TrailerFirst;
                break;
            }
            case State::Done:
                return at;
        }
    }
    return at;
}

}  // namespace pdr::wire
