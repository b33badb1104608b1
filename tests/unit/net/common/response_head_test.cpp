#include "net/common/response_head.hpp"

#include <gtest/gtest.h>
#include <boost/beast/http/error.hpp>

#include <string>
#include <string_view>
#include <vector>

namespace pdr::wire {
namespace {

namespace http = boost::beast::http;
using boost::system::error_code;

struct Parsed {
    HeadParse result = HeadParse::NeedMore;
    ResponseHead head;
    std::size_t used = 0;
    error_code ec;
};

Parsed parse(std::string_view in, bool head_request = false, std::size_t max_head = 1024) {
    Parsed p;
    p.result = parse_response_head(in, max_head, head_request, p.head, p.used, p.ec);
    return p;
}

std::string field(const ResponseHead& h, std::string_view name) {
    for (const auto& f : h.fields) {
        if (boost::beast::iequals(f.name_string(), name)) {
            return std::string(f.value());
        }
    }
    return "<none>";
}

TEST(ResponseHead, ParsesStatusFieldsAndWhereTheHeadEnds) {
    const std::string head =
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Request-Id:  abc \t\r\n"
        "X-Empty:\r\nContent-Length: 5\r\n\r\n";
    const Parsed p = parse(head + "hello");
    ASSERT_EQ(p.result, HeadParse::Done) << p.ec.message();
    EXPECT_EQ(p.used, head.size());
    EXPECT_EQ(p.head.fields.result_int(), 200u);
    EXPECT_EQ(p.head.fields.version(), 11u);
    EXPECT_EQ(field(p.head, "content-type"), "application/json");
    EXPECT_EQ(field(p.head, "X-Request-Id"), "abc");  // OWS around the value is not part of it
    EXPECT_EQ(field(p.head, "X-Empty"), "");
    EXPECT_EQ(p.head.body, BodyEnd::Length);
    EXPECT_EQ(p.head.length, 5u);
    EXPECT_TRUE(p.head.keep_alive);
    // Known names keep their code (lookups by code find them), unknown ones their spelling.
    EXPECT_EQ(p.head.fields.begin()->name(), http::field::content_type);
    EXPECT_EQ(std::next(p.head.fields.begin())->name(), http::field::unknown);
}

TEST(ResponseHead, KeepsItsOwnCopyOfTheFieldsInTheirOrder) {
    std::string text = "HTTP/1.1 200 OK\r\nA: 1\r\nB: 2\r\nA: 3\r\n\r\n";
    Parsed p = parse(text);
    ASSERT_EQ(p.result, HeadParse::Done);
    text.assign(text.size(), 'x');  // the parsed bytes are gone: the head has its own
    ResponseFields copy = p.head.fields;
    const ResponseFields moved = std::move(p.head.fields);
    p.head.fields = ResponseFields();
    for (const ResponseFields* f : {static_cast<const ResponseFields*>(&copy), &moved}) {
        std::string seen;
        for (const auto& x : *f) {
            seen.append(x.name_string()).append("=").append(x.value()).append(";");
        }
        EXPECT_EQ(seen, "A=1;B=2;A=3;");
        EXPECT_EQ((*f)["a"], "1");  // the first of a repeated name
        EXPECT_EQ((*f)["X"], "");
    }
    const ResponseFields made = ResponseFields::make(503, {{"Retry-After", "2"}, {"X", "y"}});
    EXPECT_EQ(made.result_int(), 503u);
    EXPECT_EQ(made[http::field::retry_after], "2");
    EXPECT_EQ(made["x"], "y");
}

TEST(ResponseHead, WaitsForTheWholeHeadInAnyPiece) {
    const std::string head = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n";
    for (std::size_t n = 0; n < head.size(); ++n) {
        const Parsed p = parse(head.substr(0, n));
        EXPECT_EQ(p.result, HeadParse::NeedMore) << n << " " << p.ec.message();
    }
    const Parsed p = parse(head);
    ASSERT_EQ(p.result, HeadParse::Done);
    EXPECT_EQ(p.head.body, BodyEnd::Chunked);
}

TEST(ResponseHead, FramesTheBodyAsRfc9112Says) {
    struct Case {
        std::string head;
        bool head_request;
        BodyEnd body;
        std::uint64_t length;
    };
    const std::vector<Case> cases{
        {"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", false, BodyEnd::None, 0},
        {"HTTP/1.1 200 OK\r\nContent-Length: 7, 7\r\n\r\n", false, BodyEnd::Length, 7},
        {"HTTP/1.1 200 OK\r\nContent-Length: 7\r\nContent-Length: 7\r\n\r\n", false,
         BodyEnd::Length, 7},
        {"HTTP/1.1 200 OK\r\nContent-Length: 18446744073709551615\r\n\r\n", false, BodyEnd::Length,
         18446744073709551615u},
        {"HTTP/1.1 200 OK\r\ntransfer-encoding: Chunked\r\n\r\n", false, BodyEnd::Chunked, 0},
        {"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", false, BodyEnd::Chunked, 0},
        {"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n", false, BodyEnd::ToEof, 0},
        {"HTTP/1.1 200 OK\r\n\r\n", false, BodyEnd::ToEof, 0},
        {"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n", true, BodyEnd::None, 0},
        {"HTTP/1.1 204 No Content\r\nContent-Length: 9\r\n\r\n", false, BodyEnd::None, 0},
        {"HTTP/1.1 304 Not Modified\r\n\r\n", false, BodyEnd::None, 0},
        {"HTTP/1.1 100 Continue\r\n\r\n", false, BodyEnd::None, 0},
    };
    for (const auto& c : cases) {
        SCOPED_TRACE(c.head);
        const Parsed p = parse(c.head, c.head_request);
        ASSERT_EQ(p.result, HeadParse::Done) << p.ec.message();
        EXPECT_EQ(p.head.body, c.body);
        if (c.body == BodyEnd::Length) {
            EXPECT_EQ(p.head.length, c.length);
        }
    }
}

TEST(ResponseHead, KeepAliveFollowsTheVersionAndConnection) {
    EXPECT_TRUE(parse("HTTP/1.1 200 OK\r\n\r\n").head.keep_alive);
    EXPECT_FALSE(parse("HTTP/1.1 200 OK\r\nConnection: Close\r\n\r\n").head.keep_alive);
    EXPECT_FALSE(parse("HTTP/1.1 200 OK\r\nConnection: x, close\r\n\r\n").head.keep_alive);
    EXPECT_TRUE(parse("HTTP/1.1 200 OK\r\nConnection: closed\r\n\r\n").head.keep_alive);
    EXPECT_FALSE(parse("HTTP/1.0 200 OK\r\n\r\n").head.keep_alive);
    EXPECT_TRUE(parse("HTTP/1.0 200 OK\r\nConnection: keep-alive\r\n\r\n").head.keep_alive);
}

TEST(ResponseHead, RefusesWhatIsNotAResponseHeadAtOnce) {
    struct Case {
        std::string text;
        http::error error;
    };
    const std::vector<Case> cases{
        {"HTTP/1.1 200 OK\nContent-Length: 0\r\n\r\n", http::error::bad_line_ending},
        {"HTTP/1.1 200 OK\r\nX: a\rb\r\n\r\n", http::error::bad_value},
        {"HTTP/1.1 200 OK\r\nX: a\rb", http::error::bad_line_ending},  // before the head ends
        {"HTTP/1.1 200 OK\r\n\n", http::error::bad_line_ending},
        // lines that cannot become valid fail before they end
        {"HTX", http::error::bad_version},
        {"HTTP/1.1 2x", http::error::bad_status},
        {"HTTP/1.1 200 O\x01", http::error::bad_reason},
        {"HTTP/1.1 200 OK\r\nBad Na", http::error::bad_field},
        {"HTTP/1.1 200 OK\r\nName: va\x7f", http::error::bad_value},
        {"HTTP/1.1 200 OK\r\n folded", http::error::bad_obs_fold},
        {"HTTP/2.0 200 OK\r\n\r\n", http::error::bad_version},
        {"HTTP/1.2 200 OK\r\n\r\n", http::error::bad_version},
        {"HTTP/1.1 200 OK\r\nConnection: a b\r\n\r\n", http::error::bad_value},
        {"\r\nHTTP/1.1 200 OK\r\n\r\n", http::error::bad_version},
        {"HTTX/1.1 200 OK\r\n\r\n", http::error::bad_version},
        {"HTTP/11 200 OK\r\n\r\n", http::error::bad_version},
        {"HTTP/1.1 2000 OK\r\n\r\n", http::error::bad_status},
        {"HTTP/1.1 20 OK\r\n\r\n", http::error::bad_status},
        {"HTTP/1.1 200\r\n\r\n", http::error::bad_status},
        {"HTTP/1.1 200 O\x01K\r\n\r\n", http::error::bad_reason},
        {"HTTP/1.1 200 OK\r\nX-A: 1\r\n folded\r\n\r\n", http::error::bad_obs_fold},
        {"HTTP/1.1 200 OK\r\n Lead: 1\r\n\r\n", http::error::bad_obs_fold},
        {"HTTP/1.1 200 OK\r\nBad Name: 1\r\n\r\n", http::error::bad_field},
        {"HTTP/1.1 200 OK\r\nName : 1\r\n\r\n", http::error::bad_field},
        {"HTTP/1.1 200 OK\r\n: 1\r\n\r\n", http::error::bad_field},
        {"HTTP/1.1 200 OK\r\nNoColon\r\n\r\n", http::error::bad_field},
        {"HTTP/1.1 200 OK\r\nX: a\x7f\r\n\r\n", http::error::bad_value},
        {std::string("HTTP/1.1 200 OK\r\nX: a\0z\r\n\r\n", 27), http::error::bad_value},
        {"HTTP/1.1 200 OK\r\nContent-Length: 1x\r\n\r\n", http::error::bad_content_length},
        {"HTTP/1.1 200 OK\r\nContent-Length:\r\n\r\n", http::error::bad_content_length},
        {"HTTP/1.1 200 OK\r\nContent-Length: 1,\r\n\r\n", http::error::bad_content_length},
        {"HTTP/1.1 200 OK\r\nContent-Length: 1, 2\r\n\r\n", http::error::bad_content_length},
        {"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
         http::error::bad_content_length},
        {"HTTP/1.1 200 OK\r\nContent-Length: 18446744073709551616\r\n\r\n",
         http::error::bad_content_length},
        {"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n",
         http::error::bad_transfer_encoding},
        {"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 2\r\n\r\n",
         http::error::bad_content_length},
        {"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
         http::error::bad_transfer_encoding},
    };
    for (const auto& c : cases) {
        SCOPED_TRACE(c.text);
        const Parsed p = parse(c.text);
        EXPECT_EQ(p.result, HeadParse::Failed);
        EXPECT_EQ(p.ec, make_error_code(c.error)) << p.ec.message();
    }
}

TEST(ResponseHead, AHeadThatDoesNotEndWithinTheLimitFails) {
    std::string head = "HTTP/1.1 200 OK\r\n";
    while (head.size() < 200) {
        head += "X-Pad: 0123456789\r\n";
    }
    EXPECT_EQ(parse(head + "\r\n", false, head.size() + 2).result, HeadParse::Done);
    const Parsed cut = parse(head, false, head.size() - 1);
    EXPECT_EQ(cut.result, HeadParse::Failed);
    EXPECT_EQ(cut.ec, make_error_code(http::error::header_limit));
    // Bytes past the limit are not looked at: a head that ends beyond it fails the same way.
    const Parsed over = parse(head + "\r\n", false, head.size());
    EXPECT_EQ(over.result, HeadParse::Failed);
    EXPECT_EQ(over.ec, make_error_code(http::error::header_limit));
}

}  // namespace
}  // namespace pdr::wire
