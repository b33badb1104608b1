// libFuzzer target for the upstream answer's head parser (net/common/response_head.cpp), against
// Beast's response parser, which did the job before it. The first byte picks the mode:
// - any bytes (first byte even): the rest is an answer's start, given whole and in pieces
//   (lengths from the input). Ours may refuse more than Beast (it is stricter by design: folded
//   lines, a lone CR, framing fields repeated or combined), never less: what Beast refuses ours
//   refuses, and when ours takes a head, Beast takes it too, with the same status, version and
//   fields (in order within a name: Beast groups a repeated name), the same head length, and the
//   same framing and keep-alive where the router relies on them (one Transfer-Encoding field that
//   says "chunked", or none; keep-alive where the body does not end with the connection, with one
//   Connection field or none). In pieces, ours reaches the same verdict as whole, and never refuses
//   a prefix of a head it takes;
// - a valid head built from the input (first byte odd): ours takes it, and agrees with Beast.
// Build and run: scripts/fuzz response_head SECONDS. Seeds: corpus/response_head/.
#include <boost/beast/core/string.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/parser.hpp>

#include <algorithm>
#include <cctype>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "net/common/response_head.hpp"

namespace {

namespace http = boost::beast::http;
using boost::system::error_code;
using pdr::wire::BodyEnd;
using pdr::wire::HeadParse;
using pdr::wire::ResponseHead;

constexpr std::size_t kMaxHead = 2048;

void check(bool ok) {
    if (!ok) {
        std::abort();
    }
}

struct Beast {
    bool failed = false;
    bool header_done = false;
    std::size_t used = 0;
    http::response_parser<http::empty_body> parser;
};

void run_beast(std::string_view in, bool head_request, Beast& b) {
    b.parser.header_limit(kMaxHead);
    b.parser.body_limit(std::numeric_limits<std::uint64_t>::max());
    b.parser.eager(false);
    if (head_request) {
        b.parser.skip(true);
    }
    error_code ec;
    try {
        b.used = b.parser.put(boost::asio::buffer(in.data(), in.size()), ec);
    } catch (const std::length_error&) {
        b.failed = true;  // a field Beast cannot store
        return;
    }
    b.failed = ec && ec != http::error::need_more;
    b.header_done = !ec && b.parser.is_header_done();
}

std::size_t count_fields(const http::response_header<>& h, http::field f) {
    std::size_t n = 0;
    for (const auto& x : h) {
        n += x.name() == f ? 1 : 0;
    }
    return n;
}

// What the router relays: no Transfer-Encoding, or exactly one "chunked".
bool plain_coding(const http::response_header<>& h) {
    std::size_t te = 0;
    for (const auto& x : h) {
        if (x.name() == http::field::transfer_encoding &&
            (++te > 1 || !boost::beast::iequals(x.value(), "chunked"))) {
            return false;
        }
    }
    return true;
}

void compare(const ResponseHead& ours, std::size_t used, Beast& b, bool head_request) {
    check(b.header_done && !b.failed);
    check(b.used == used);
    const auto& theirs = b.parser.get();
    check(theirs.result_int() == ours.fields.result_int());
    check(theirs.version() == ours.fields.version());
    // Beast keeps fields of one name together (a repeated one goes after the last of its name);
    // ours are in the order they came: compare them grouped by name, in order within a name.
    using Field = std::tuple<std::string, int, std::string, std::string>;
    auto grouped = [](const auto& fields) {
        std::vector<Field> out;
        for (const auto& f : fields) {
            std::string key(std::string_view(f.name_string()));
            for (char& c : key) {
                c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
            }
            out.emplace_back(key, static_cast<int>(f.name()), std::string_view(f.name_string()),
                             std::string_view(f.value()));
        }
        std::stable_sort(out.begin(), out.end(), [](const Field& x, const Field& y) {
            return std::get<0>(x) < std::get<0>(y);
        });
        return out;
    };
    check(grouped(ours.fields) == grouped(theirs));
    if (plain_coding(theirs)) {
        const bool none = head_request || b.parser.is_done();
        check((ours.body == BodyEnd::None) == none);
        if (!none) {
            check((ours.body == BodyEnd::Chunked) == b.parser.chunked());
            const auto length = b.parser.content_length();
            check((ours.body == BodyEnd::Length) == length.has_value());
            check(ours.body != BodyEnd::Length || ours.length == *length);
        }
    }
    // (A body that ends with the connection is never kept alive, whatever the fields say.)
    if (count_fields(theirs, http::field::connection) <= 1 && ours.body != BodyEnd::ToEof &&
        b.parser.is_done() == (ours.body == BodyEnd::None)) {
        check(ours.keep_alive == b.parser.keep_alive());
    }
}

HeadParse parse(std::string_view in, bool head_request, ResponseHead& out, std::size_t& used) {
    error_code ec;
    const HeadParse r = pdr::wire::parse_response_head(in, kMaxHead, head_request, out, used, ec);
    check((r == HeadParse::Failed) == static_cast<bool>(ec));
    check(r != HeadParse::Done || (used > 0 && used <= in.size()));
    return r;
}

void differential(std::string_view in, bool head_request) {
    ResponseHead ours;
    std::size_t used = 0;
    const HeadParse whole = parse(in, head_request, ours, used);
    Beast b;
    run_beast(in, head_request, b);
    if (b.failed) {
        check(whole == HeadParse::Failed);
    }
    if (whole == HeadParse::Done) {
        compare(ours, used, b, head_request);
    }
    // In pieces: the same verdict in the end, and nothing refused before it.
    std::size_t at = 0;
    while (at < in.size()) {
        // Pieces of 1..16 bytes in a head's first 64 bytes (its status line and first field),
        // 1..64 after (each piece parses the prefix again: whole-input speed stays usable).
        at += 1 + (static_cast<unsigned char>(in[at]) & (at < 64 ? 0x0f : 0x3f));
        if (at > in.size()) {
            at = in.size();
        }
        ResponseHead part;
        std::size_t part_used = 0;
        const HeadParse r = parse(in.substr(0, at), head_request, part, part_used);
        if (r != HeadParse::NeedMore) {
            check(r == whole);
            check(r != HeadParse::Done || part_used == used);
            break;
        }
        check(whole != HeadParse::Done || at < used);
    }
}

// A valid head from the input's bytes.
std::string build(std::string_view in, bool& head_request) {
    std::size_t at = 0;
    auto next = [&]() -> unsigned {
        return at < in.size() ? static_cast<unsigned char>(in[at++]) : 0;
    };
    static constexpr std::string_view kNames[] = {
        "Content-Type", "X-Request-Id", "Connection", "Content-Length", "Transfer-Encoding",
        "Retry-After",  "Server",       "X-Custom-1", "date",           "CONTENT-ENCODING"};
    static constexpr std::string_view kValues[] = {
        "application/json", "close",    "keep-alive", "chunked", "12",     "0", "",
        "a  b\tc",          "\x80\xff", "x, y",       "7, 7",    "Chunked"};
    head_request = (next() & 1) != 0;
    std::string head = "HTTP/1.";
    head.push_back(static_cast<char>('0' + next() % 2));
    const unsigned status = 200 + next() % 400;
    head += ' ' + std::to_string(status) + ' ';
    const unsigned reason = next() % 4;
    head += reason == 0 ? "" : reason == 1 ? "OK" : reason == 2 ? "Bad\tThing" : "x\x90y";
    head += "\r\n";
    bool length = false;
    bool coding = false;
    const unsigned fields = next() % 8;
    for (unsigned i = 0; i < fields; ++i) {
        const auto& name = kNames[next() % std::size(kNames)];
        std::string_view value = kValues[next() % std::size(kValues)];
        const bool is_length = boost::beast::iequals(name, "content-length");
        const bool is_coding = boost::beast::iequals(name, "transfer-encoding");
        if (is_length) {
            if (coding || length) {
                continue;
            }
            value = (next() & 1) ? "12" : "7, 7";
            length = true;
        }
        if (is_coding) {
            if (coding || length) {
                continue;
            }
            value = (next() & 1) ? "chunked" : "gzip, chunked";
            coding = true;
        }
        if (boost::beast::iequals(name, "connection")) {
            value = (next() & 1) ? "close" : "keep-alive, x";
        }
        head.append(name).append(":");
        head.append(next() % 3, ' ');
        head.append(value);
        head.append(next() % 2, '\t');
        head.append("\r\n");
    }
    head += "\r\n";
    return head;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size == 0) {
        return 0;
    }
    const std::string_view in(reinterpret_cast<const char*>(data) + 1, size - 1);
    if ((data[0] & 1) == 0) {
        differential(in, (data[0] & 2) != 0);
        return 0;
    }
    bool head_request = false;
    const std::string head = build(in, head_request);
    ResponseHead ours;
    std::size_t used = 0;
    check(parse(head + "body", head_request, ours, used) == HeadParse::Done);
    check(used == head.size());
    Beast b;
    run_beast(head, head_request, b);
    compare(ours, used, b, head_request);
    differential(head, head_request);
    return 0;
}
