#include "net/common/chunked.hpp"

#include <gtest/gtest.h>
#include <boost/beast/http/error.hpp>

#include <string>
#include <vector>

namespace pdr::wire {
namespace {

namespace http = boost::beast::http;
using boost::system::error_code;

// The caller's side: bytes arrive in pieces into a buffer, the decoder uses what it can from
// its front, and the rest waits for the next piece (as StreamImpl does with its flat_buffer).
struct Feed {
    explicit Feed(std::size_t max_framing = 1024) : decoder(max_framing) {}
    ChunkedDecoder decoder;
    std::string buffered;  // given, not used yet
    std::string body;
    error_code ec;

    // Adds `piece` and decodes; false once the decoder failed.
    bool put(std::string_view piece) {
        buffered += piece;
        const std::size_t used = decoder.decode(buffered, body, ec);
        EXPECT_LE(used, buffered.size());
        buffered.erase(0, used);
        return !ec;
    }
};

Feed decode_whole(std::string_view wire) {
    Feed f;
    f.put(wire);
    return f;
}

TEST(ChunkedDecoder, DecodesABodyAndStopsAtItsEnd) {
    Feed f = decode_whole("5\r\nhello\r\n1\r\n \r\n6\r\nworld!\r\n0\r\n\r\nHTTP/1.1 200 OK\r\n");
    EXPECT_FALSE(f.ec) << f.ec.message();
    EXPECT_TRUE(f.decoder.done());
    EXPECT_EQ(f.body, "hello world!");
    EXPECT_EQ(f.buffered, "HTTP/1.1 200 OK\r\n");  // the next answer's bytes are left alone
    // Once done, nothing more is used.
    f.put("more");
    EXPECT_EQ(f.buffered, "HTTP/1.1 200 OK\r\nmore");
    EXPECT_EQ(f.body, "hello world!");
}

// Whatever the pieces, the same body: every split of a body with extensions, a quoted string
// and trailers, down to one byte at a time; a body not yet ended is never an error.
TEST(ChunkedDecoder, EverySplitDecodesTheSameBody) {
    const std::string wire =
        "A;name=value;q=\"a;b\\\"c\"\r\n0123456789\r\n"
        "17 \t; ext\t=\t\"x\" ; flag\r\ndata: {\"text\":\"hi\"}\r\n\r\n\r\n"
        "00000000000000003\r\nabc\r\n"
        "0;last\r\nX-Trailer: one two\r\nEmpty:\r\n\r\n";
    const std::string want = "0123456789data: {\"text\":\"hi\"}\r\n\r\nabc";
    for (std::size_t cut1 = 0; cut1 <= wire.size(); ++cut1) {
        for (std::size_t cut2 = cut1; cut2 <= wire.size(); cut2 += 7) {
            Feed f;
            ASSERT_TRUE(f.put(wire.substr(0, cut1))) << cut1 << ": " << f.ec.message();
            ASSERT_TRUE(f.put(wire.substr(cut1, cut2 - cut1))) << cut2 << ": " << f.ec.message();
            EXPECT_EQ(f.decoder.done(), cut2 == wire.size()) << cut2;
            ASSERT_TRUE(f.put(wire.substr(cut2))) << f.ec.message();
            ASSERT_TRUE(f.decoder.done()) << cut1 << " " << cut2;
            ASSERT_EQ(f.body, want) << cut1 << " " << cut2;
            ASSERT_TRUE(f.buffered.empty());
        }
    }
    Feed bytewise;
    for (char c : wire) {
        ASSERT_TRUE(bytewise.put(std::string_view(&c, 1))) << bytewise.ec.message();
        // Framing waits whole in the buffer, data never does.
        ASSERT_LT(bytewise.buffered.size(), 40u);
    }
    EXPECT_TRUE(bytewise.decoder.done());
    EXPECT_EQ(bytewise.body, want);
}

TEST(ChunkedDecoder, AcceptsTheExtensionGrammar) {
    for (std::string line :
         {"1", "01", "1;a", "1;a=b", "1 ;a", "1\t;a", "1; a", "1;a =b", "1;a= b", "1;a = b",
          "1;a;b;c", "1;a=b;c=d", "1;a=\"\"", "1;a=\"x y\t\\\"\\\\\x80\"", "1;a=\"b\" ;c",
          "1;!#$%&'*+-.^_`|~09AZaz=!#$%&'*+-.^_`|~", "1;a=b ;c"}) {
        SCOPED_TRACE(line);
        Feed f = decode_whole(line + "\r\nx\r\n0\r\n\r\n");
        EXPECT_FALSE(f.ec) << f.ec.message();
        EXPECT_TRUE(f.decoder.done());
        EXPECT_EQ(f.body, "x");
    }
}

TEST(ChunkedDecoder, RefusesWhatTheGrammarDoesNotAllow) {
    struct Case {
        std::string wire;
        http::error want;
    };
    const std::vector<Case> cases{
        {"\r\nx\r\n0\r\n\r\n", http::error::bad_chunk},  // no size
        {"g\r\n", http::error::bad_chunk},               // not hex
        {"-1\r\n", http::error::bad_chunk},
        {"1 \r\nx\r\n", http::error::bad_chunk_extension},  // BWS then the line's end
        {"1;\r\n", http::error::bad_chunk_extension},       // no name
        {"1;a \r\n", http::error::bad_chunk_extension},
        {"1;a=\r\n", http::error::bad_chunk_extension},  // no value
        {"1;a=b c\r\n", http::error::bad_chunk_extension},
        {"1;a=\"b\r\n", http::error::bad_chunk_extension},  // an unterminated quote
        {"1;a=\"b\"c\r\n", http::error::bad_chunk_extension},
        {"1;a(b\r\n", http::error::bad_chunk_extension},  // not a tchar
        {"1;a=\"\x01\"\r\n", http::error::bad_chunk_extension},
        {"1x\r\n", http::error::bad_chunk_extension},
        {"1\nx\r\n", http::error::bad_line_ending},         // bare LF
        {"1\rx\n", http::error::bad_line_ending},           // CR without LF
        {"1\r\nxy\r\n", http::error::bad_chunk},            // data longer than its size
        {"2\r\nxy\n0\r\n\r\n", http::error::bad_chunk},     // data then a bare LF
        {"10000000000000000\r\n", http::error::bad_chunk},  // 65 bits
        {"0\r\n \r\n\r\n", http::error::bad_field},         // a folded trailer line
        {"0\r\nX-A: b\r\n c\r\n\r\n", http::error::bad_field},
        {"0\r\n: b\r\n\r\n", http::error::bad_field},  // an empty name
        {"0\r\nX-A b\r\n\r\n", http::error::bad_field},
        {"0\r\nX-A\r\n\r\n", http::error::bad_line_ending},  // no colon
        {"0\r\nX-A: \x01\r\n\r\n", http::error::bad_value},
        {"0\r\nX-A: b\n\r\n", http::error::bad_line_ending},
        {"0\r\n\n", http::error::bad_line_ending},
        {"0\r\n\rx", http::error::bad_line_ending},
    };
    for (const Case& c : cases) {
        SCOPED_TRACE(c.wire);
        Feed f = decode_whole(c.wire);
        EXPECT_EQ(f.ec, error_code(c.want)) << f.ec.message();
        EXPECT_FALSE(f.decoder.done());
    }
}

// A line that can no longer be valid fails as soon as its bad byte arrives, not when the line
// ends: an upstream that sends half a bad line and then nothing does not hold the leg until
// its idle timeout.
TEST(ChunkedDecoder, FailsAtTheFirstBadByte) {
    for (std::string_view wire :
         {"z", "1;(", "1 x", "1\n", "1\rz", "5\r\nhelloX", "0\r\n ", "0\r\nX-A\x01"}) {
        SCOPED_TRACE(wire);
        Feed f = decode_whole(wire);
        EXPECT_TRUE(f.ec);
    }
    // ... and not before: each of these may still become a valid body.
    for (std::string_view wire :
         {"", "1", "1;", "1;a=", "1;a=\"x", "1;a=\"x\\", "1 ", "1\r", "5\r\nhel", "5\r\nhello\r",
          "0\r\n", "0\r\nX-A", "0\r\nX-A: b", "0\r\nX-A: b\r\n", "0\r\n\r"}) {
        SCOPED_TRACE(wire);
        Feed f = decode_whole(wire);
        EXPECT_FALSE(f.ec) << f.ec.message();
        EXPECT_FALSE(f.decoder.done());
    }
}

TEST(ChunkedDecoder, SixtyFourBitSizesAndLongData) {
    Feed f;
    ASSERT_TRUE(f.put("ffffffffffffffff\r\n"));
    std::string big(100'000, 'd');
    ASSERT_TRUE(f.put(big));
    EXPECT_EQ(f.body.size(), big.size());
    EXPECT_TRUE(f.buffered.empty());  // data is used as it comes, never held
    EXPECT_FALSE(f.decoder.done());
}

// Framing is held whole in the caller's buffer until its line ends, so its length is bounded:
// a size line (its extensions) or a trailer section past the limit fails instead of growing
// the buffer without end, even when it comes one byte at a time.
TEST(ChunkedDecoder, FramingOverItsLimitFails) {
    Feed line(64);
    ASSERT_TRUE(line.put("1;a=\"" + std::string(50, 'x')));
    bool ok = true;
    for (int i = 0; i < 20 && ok; ++i) {
        ok = line.put("x");
    }
    EXPECT_EQ(line.ec, error_code(http::error::buffer_overflow));
    EXPECT_LE(line.buffered.size(), 65u);  // the limit, and the byte that went past it

    Feed within(64);
    EXPECT_TRUE(within.put("1;a=\"" + std::string(50, 'x') + "\"\r\nx\r\n0\r\n\r\n"));
    EXPECT_TRUE(within.decoder.done());

    // The limit holds for lines that come whole: 64 bytes with the CRLF pass, 65 do not.
    Feed exact(64);
    EXPECT_TRUE(exact.put("1;a=\"" + std::string(56, 'x') + "\"\r\nx\r\n0\r\n\r\n"));
    EXPECT_TRUE(exact.decoder.done());
    Feed over(64);
    EXPECT_FALSE(over.put("1;a=\"" + std::string(57, 'x') + "\"\r\nx\r\n0\r\n\r\n"));
    EXPECT_EQ(over.ec, error_code(http::error::buffer_overflow));

    // A trailer section of exactly the limit (its empty line included) passes.
    Feed section(64);
    EXPECT_TRUE(section.put("0\r\nX-A: " + std::string(55, 'v') + "\r\n\r\n"));
    EXPECT_TRUE(section.decoder.done());
    Feed section_over(64);
    EXPECT_FALSE(section_over.put("0\r\nX-A: " + std::string(56, 'v') + "\r\n\r\n"));
    EXPECT_EQ(section_over.ec, error_code(http::error::buffer_overflow));

    Feed trailer(64);
    ASSERT_TRUE(trailer.put("0\r\n"));
    ok = true;
    for (int i = 0; i < 20 && ok; ++i) {
        ok = trailer.put("X-A: b\r\n");  // whole lines, each short: the section is what grows
    }
    EXPECT_EQ(trailer.ec, error_code(http::error::buffer_overflow));
}

}  // namespace
}  // namespace pdr::wire
