// libFuzzer target for the chunked-body decoder of the upstream legs (net/common/chunked.cpp),
// against Beast's parser, which did the job before it. The first byte picks one of two modes:
// - any bytes: the input is an answer's body after a "Transfer-Encoding: chunked" head. The
//   decoder takes it in pieces (lengths from the input), Beast's parser in one piece, with the
//   checks the router wrapped around it (a bare LF in what it leaves over is an error; see
//   wire::parse_buffered). Both must reach the same end (the body complete, at the same byte,
//   with the same bytes; an error; or waiting for more), with the same body bytes, except that
//   the decoder may fail while Beast still waits (it judges a line before the line ends);
// - a valid body built from the input (chunks of its bytes, extensions and trailers from the
//   grammar's pieces): the decoder, in pieces, never fails before the end and gives the data
//   back whole, stopping at the body's end; Beast agrees.
// Build and run: scripts/fuzz chunked SECONDS. Seeds: corpus/chunked/.
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <string>
#include <string_view>

#include "net/common/chunked.hpp"

namespace {

namespace http = boost::beast::http;
using boost::system::error_code;

constexpr std::size_t kMaxFraming = 32 * 1024;  // as the router uses it (wire::kMaxUnparsed)

enum class End { Done, Failed, Waiting };

struct Outcome {
    End end = End::Waiting;
    std::string body;
    std::size_t used = 0;  // bytes of the input used
    error_code ec;         // the decoder's, when it failed
};

// The bytes are read in pieces whose lengths come from the bytes themselves: a stable split.
Outcome decode_in_pieces(std::string_view in, bool expect_valid,
                         std::size_t max_framing = kMaxFraming) {
    pdr::wire::ChunkedDecoder decoder(max_framing);
    Outcome o;
    std::string buffered;
    std::size_t at = 0;
    while (at < in.size()) {
        const std::size_t n = std::min<std::size_t>(in.size() - at, 1 + (in[at] & 0x1f));
        buffered.append(in.substr(at, n));
        at += n;
        error_code ec;
        const std::size_t used = decoder.decode(buffered, o.body, ec);
        if (used > buffered.size()) {
            std::abort();
        }
        buffered.erase(0, used);
        o.used = at - buffered.size();
        if (ec) {
            if (expect_valid) {
                std::abort();  // a valid body refused
            }
            o.end = End::Failed;
            o.ec = ec;
            return o;
        }
        if (decoder.done()) {
            o.end = End::Done;
            return o;
        }
        if (buffered.size() > max_framing) {
            std::abort();  // framing held past the limit
        }
        if (expect_valid && at < in.size() && buffered.size() > 200) {
            std::abort();  // framing held longer than any line the generator writes
        }
    }
    return o;
}

bool has_bare_lf(std::string_view text) {
    for (auto i = text.find('\n'); i != std::string_view::npos; i = text.find('\n', i + 1)) {
        if (i == 0 || text[i - 1] != '\r') {
            return true;
        }
    }
    return false;
}

Outcome beast_decode(std::string_view in) {
    http::response_parser<http::string_body> parser;
    parser.body_limit(std::numeric_limits<std::uint64_t>::max());
    error_code ec;
    const std::string_view head = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n";
    if (parser.put(boost::asio::buffer(head.data(), head.size()), ec) != head.size() || ec ||
        !parser.is_header_done()) {
        std::abort();
    }
    parser.eager(true);
    Outcome o;
    if (!in.empty()) {
        o.used = parser.put(boost::asio::buffer(in.data(), in.size()), ec);
    } else {
        ec = http::error::need_more;
    }
    o.body = parser.get().body();
    if (parser.is_done()) {
        o.end = End::Done;
    } else if (!ec || ec == http::error::need_more) {
        o.end = has_bare_lf(in.substr(o.used)) ? End::Failed : End::Waiting;
    } else {
        o.end = End::Failed;
    }
    return o;
}

// Where the decoder is stricter than Beast, on purpose: Beast takes any byte but '"' in a
// quoted extension value (a control byte, a bare LF), and folded trailer lines. RFC 9112 takes
// neither. True when the framing line at `at` (up to its CRLF) is such a line: it starts with
// SP or HTAB, or has a control byte after a '"'.
bool refused_on_purpose(std::string_view in, std::size_t at) {
    const std::string_view line = in.substr(at, in.find("\r\n", at) - at);
    if (!line.empty() && (line[0] == ' ' || line[0] == '\t')) {
        return true;  // a folded trailer line
    }
    const std::size_t quote = line.find('"');
    if (quote == std::string_view::npos) {
        return false;
    }
    return std::any_of(line.begin() + static_cast<std::ptrdiff_t>(quote) + 1, line.end(),
                       [](char ch) {
                           const auto c = static_cast<unsigned char>(ch);
                           return (c < 0x20 && c != '\t') || c == 0x7f;
                       });
}

void compare_any(std::string_view in) {
    const Outcome ours = decode_in_pieces(in, false);
    const Outcome beast = beast_decode(in);
    // With a small framing limit, the same end, or a buffer_overflow on the way.
    const Outcome small = decode_in_pieces(in, false, 64);
    if ((small.end != ours.end || small.body != ours.body || small.used != ours.used) &&
        (small.end != End::Failed || small.ec != http::error::buffer_overflow ||
         ours.body.compare(0, small.body.size(), small.body) != 0)) {
        std::abort();
    }
    if (ours.end == End::Failed) {
        // The body bytes before the failure are Beast's; Beast may have gone further (past
        // the line the decoder refused) only where that line is refused on purpose. Else it
        // failed too, or still waits at that line.
        if (beast.body.compare(0, ours.body.size(), ours.body) != 0) {
            std::abort();
        }
        const std::size_t eol = in.find("\r\n", ours.used);
        const bool further = beast.end == End::Done || beast.body.size() > ours.body.size() ||
                             (eol != std::string_view::npos && beast.used >= eol + 2);
        if (further && !refused_on_purpose(in, ours.used)) {
            std::abort();
        }
        return;
    }
    if (ours.body != beast.body || ours.end != beast.end ||
        (ours.end == End::Done && ours.used != beast.used)) {
        std::abort();
    }
}

// A valid chunked body from the input's bytes: each chunk takes a length byte, an extension
// byte and that many data bytes; the last chunk, an extension byte and a trailer byte.
struct Builder {
    std::string_view in;
    std::size_t at = 0;

    unsigned next() { return at < in.size() ? static_cast<unsigned char>(in[at++]) : 0; }

    static std::string_view pick(unsigned b, std::initializer_list<std::string_view> options) {
        return *(options.begin() + b % options.size());
    }

    void extensions(std::string& out, unsigned b) {
        const unsigned count = b % 4;
        for (unsigned i = 0; i < count; ++i) {
            const unsigned c = next();
            out += pick(c, {"", " ", "\t", " \t "});
            out += ';';
            out += pick(c >> 2, {"", " "});
            out += pick(c >> 3, {"a", "name", "!#$%&'*+-.^_`|~09AZ", "X-Ext"});
            const unsigned v = next();
            switch (v % 4) {
                case 0:
                    break;
                case 1:
                    out += pick(v >> 2, {"=", " =", "= ", "\t=\t"});
                    out += pick(v >> 4, {"v", "token-1", "~~"});
                    break;
                default:
                    out += pick(v >> 2, {"=", " = "});
                    out += pick(v >> 3, {"\"\"", "\"q s\"", "\"a;b=c\"", "\"\\\"\\\\\"",
                                         "\"\x80\xff\t!\"", "\"x\\\x80\"", "\"\\a\\ \\\t\\~\""});
                    break;
            }
        }
    }

    std::string build(std::string& data) {
        std::string out;
        while (at < in.size()) {
            const unsigned len = next();
            if (len == 0) {
                break;
            }
            const unsigned ext = next();
            std::string exts;
            extensions(exts, ext);  // takes bytes of the input too
            const std::size_t n = std::min<std::size_t>(len % 64 + 1, in.size() - at);
            if (n == 0) {
                break;
            }
            static const char* const digits = "0123456789abcdefABCDEF";
            std::string hex;
            for (std::size_t v = n; v > 0; v /= 16) {
                hex.insert(hex.begin(), digits[v % 16 + (v % 16 >= 10 && (ext & 0x80) ? 6 : 0)]);
            }
            out.append(ext & 0x40 ? "000" : "").append(hex).append(exts);
            out += "\r\n";
            out.append(in.substr(at, n));
            data.append(in.substr(at, n));
            at += n;
            out += "\r\n";
        }
        out += pick(next(), {"0", "000"});
        extensions(out, next());
        out += "\r\n";
        const unsigned t = next();
        for (unsigned i = 0; i < t % 3; ++i) {
            out += pick(t >> 2, {"X-T", "Trailer-A", "x"});
            out += ':';
            out += pick(t >> 4, {"", " v", " a b\tc ", "\x80\xfe"});
            out += "\r\n";
        }
        out += "\r\n";
        return out;
    }
};

void check_valid(std::string_view in) {
    Builder b{in};
    std::string data;
    std::string wire = b.build(data);
    const std::size_t end = wire.size();
    wire += "HTTP/1.1";  // the next answer's first bytes: left alone
    const Outcome ours = decode_in_pieces(wire, true);
    if (ours.end != End::Done || ours.body != data || ours.used != end) {
        std::abort();
    }
    const Outcome beast = beast_decode(wire);
    if (beast.end != End::Done || beast.body != data || beast.used != end) {
        std::abort();
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size < 1) {
        return 0;
    }
    const std::string_view in(reinterpret_cast<const char*>(data) + 1, size - 1);
    if (data[0] & 1) {
        check_valid(in);
    } else {
        compare_any(in);
    }
    return 0;
}
