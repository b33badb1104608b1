// SseCutter: a relayed stream is passed on in whole events; the unfinished rest is held.
#include "net/common/sse_cut.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

namespace pdr {
namespace {

// Feeds `pieces` one by one; returns what would be sent for each.
std::vector<std::string> feed(SseCutter& c, const std::vector<std::string>& pieces) {
    std::vector<std::string> sent;
    for (std::string p : pieces) {
        c.take(p);
        sent.push_back(p);
    }
    return sent;
}

TEST(SseEventsEnd, FindsTheLastBlankLineOfAnyLineEnd) {
    EXPECT_EQ(sse_events_end(""), 0u);
    EXPECT_EQ(sse_events_end("data: a\n"), 0u);
    EXPECT_EQ(sse_events_end("data: a\n\n"), 9u);
    EXPECT_EQ(sse_events_end("data: a\n\ndata: b"), 9u);
    EXPECT_EQ(sse_events_end("data: a\r\n\r\ndata: b\r\n"), 11u);
    EXPECT_EQ(sse_events_end("data: a\r\rdata: b"), 9u);
    EXPECT_EQ(sse_events_end("data: a\n\ndata: b\r\n\r\n"), 20u);
    EXPECT_TRUE(ends_an_sse_event(""));
    EXPECT_TRUE(ends_an_sse_event("x\r\n\r\n"));
    EXPECT_FALSE(ends_an_sse_event("x\r\n"));
    EXPECT_FALSE(ends_an_sse_event("x\n"));
}

TEST(SseEventsEnd, MixedLineEndsEndAnEvent) {
    // LF lines with a CRLF blank line, CRLF lines with an LF blank line, CR with CRLF ...
    EXPECT_EQ(sse_events_end("data: a\n\r\ndata: b"), 10u);
    EXPECT_EQ(sse_events_end("data: a\r\n\ndata: b"), 10u);
    EXPECT_EQ(sse_events_end("data: a\r\r\ndata: b"), 10u);
    EXPECT_EQ(sse_events_end("data: a\r\n\rdata: b"), 10u);
    EXPECT_EQ(sse_events_end("data: a\n\rdata: b"), 9u);
    for (std::string_view e : {"x\n\r\n", "x\r\n\n", "x\r\r\n", "x\r\n\r", "x\n\r"}) {
        EXPECT_TRUE(ends_an_sse_event(e)) << e;
    }
    // One line end, CRLF included, is not a blank line.
    EXPECT_FALSE(ends_an_sse_event("x\r\n"));
    EXPECT_FALSE(ends_an_sse_event("x\r"));
    EXPECT_EQ(sse_events_end("data: a\r\ndata: b\r\n"), 0u);
}

// The one-pass scan against the definition: the end of the last "line end, line end" pair, over
// every string of up to 9 characters from {a, LF, CR} (line ends: CRLF, LF, CR).
constexpr std::string_view kBlankLines[] = {"\n\n",   "\n\r",   "\r\r",   "\n\r\n",
                                            "\r\r\n", "\r\n\n", "\r\n\r", "\r\n\r\n"};

std::size_t reference_events_end(std::string_view b) {
    std::size_t end = 0;
    for (std::string_view blank : kBlankLines) {
        if (const std::size_t at = b.rfind(blank); at != std::string_view::npos) {
            end = std::max(end, at + blank.size());
        }
    }
    return end;
}

// Calls `check` with every string of up to `max_len` characters from {a, LF, CR}.
template <class Check>
void for_each_short_text(std::size_t max_len, Check check) {
    const char alphabet[] = {'a', '\n', '\r'};
    for (std::size_t len = 0; len <= max_len; ++len) {
        std::size_t combos = 1;
        for (std::size_t i = 0; i < len; ++i) {
            combos *= 3;
        }
        for (std::size_t code = 0; code < combos; ++code) {
            std::string b;
            for (std::size_t i = 0, c = code; i < len; ++i, c /= 3) {
                b += alphabet[c % 3];
            }
            check(b);
        }
    }
}

TEST(SseEventsEnd, MatchesTheDefinitionExhaustively) {
    std::size_t checked = 0;
    for_each_short_text(9, [&](const std::string& b) {
        ASSERT_EQ(sse_events_end(b), reference_events_end(b)) << testing::PrintToString(b);
        ++checked;
    });
    EXPECT_EQ(checked, 29524u);
}

// Texts longer than the vectorized searches' blocks (memrchr reads 32 bytes and more at a
// time): every kind of blank line, and a lone line end, at every position.
TEST(SseEventsEnd, LongTextsMatchTheDefinitionAtEveryPosition) {
    std::size_t checked = 0;
    for (std::size_t n : {31u, 64u, 200u}) {
        for (std::string_view blank : kBlankLines) {
            for (std::size_t at = 0; at <= n; ++at) {
                for (std::string_view lone : {"", "\n", "\r", "\r\n"}) {
                    std::string b(n, 'a');
                    b.insert(at, blank);
                    b.insert((at * 7 + 3) % (b.size() + 1), lone);
                    ASSERT_EQ(sse_events_end(b), reference_events_end(b))
                        << testing::PrintToString(b);
                    ++checked;
                }
            }
        }
    }
    EXPECT_EQ(checked, 3u * 8u * 4u + 8u * 4u * (31u + 64u + 200u));
}

TEST(SseLineEnds, FindsTheFirstCrOrLfFromWhereEachLineStarts) {
    EXPECT_EQ(SseLineEnds("").next(0), 0u);
    EXPECT_EQ(SseLineEnds("abc").next(0), 3u);
    EXPECT_EQ(SseLineEnds("abc").next(5), 3u);
    SseLineEnds crlf("data: a\r\nb");
    EXPECT_EQ(crlf.next(0), 7u);
    EXPECT_EQ(crlf.next(8), 8u);
    EXPECT_EQ(crlf.next(9), 10u);
    SseLineEnds mixed("a\rb\nc");
    EXPECT_EQ(mixed.next(0), 1u);
    EXPECT_EQ(mixed.next(2), 3u);
    EXPECT_EQ(mixed.next(4), 5u);
    std::string longer(100, 'x');
    longer[77] = '\r';
    longer[50] = '\n';
    longer[40] = '\r';
    SseLineEnds ends(longer);
    EXPECT_EQ(ends.next(0), 40u);
    EXPECT_EQ(ends.next(41), 50u);
    EXPECT_EQ(ends.next(51), 77u);
    EXPECT_EQ(ends.next(78), 100u);
}

// Every line of texts of up to 7 characters from {a, LF, CR}, and of long texts with CR-only,
// LF-only and mixed line ends, against a byte-at-a-time walk.
TEST(SseLineEnds, WalkingEveryLineMatchesAByteAtATimeWalk) {
    auto reference = [](std::string_view b, std::size_t from) {
        while (from < b.size() && b[from] != '\n' && b[from] != '\r') {
            ++from;
        }
        return from;
    };
    auto check = [&](const std::string& b) {
        SseLineEnds ends(b);
        for (std::size_t from = 0; from <= b.size();) {
            const std::size_t got = ends.next(from);
            ASSERT_EQ(got, reference(b, from)) << testing::PrintToString(b) << " from " << from;
            from = got + 1;
        }
    };
    for_each_short_text(7, check);
    for (std::string_view end : {"\r", "\n", "\r\n", "\n\r"}) {
        std::string b;
        for (int line = 0; line < 300; ++line) {
            b.append(static_cast<std::size_t>(line % 37), 'x').append(end);
        }
        check(b);
    }
}

// Lines that end in CR alone, with no blank line: the answer is 0, and (since the fix for the
// review of 56543a2) the last LF is not searched for again at every line.
TEST(SseEventsEnd, ManyCrOnlyLinesWithoutABlankLine) {
    std::string b;
    for (int i = 0; i < 20000; ++i) {
        b += "x\r";
    }
    EXPECT_EQ(sse_events_end(b), 0u);
    b.insert(0, "\n");
    EXPECT_EQ(sse_events_end(b), 0u);
    b += "\r";
    EXPECT_EQ(sse_events_end(b), b.size());
    EXPECT_EQ(sse_events_end(b), reference_events_end(b));
}

TEST(SseCutter, EventsWithMixedLineEndsPassAsTheyCome) {
    SseCutter c;
    auto sent = feed(c, {"data: 1\n\r\n", "data: 2\n\r\ndata: 3", "\n\r\n"});
    EXPECT_EQ(sent, (std::vector<std::string>{"data: 1\n\r\n", "data: 2\n\r\n", "data: 3\n\r\n"}));
    EXPECT_EQ(c.held(), 0u);
    EXPECT_TRUE(c.at_boundary());
}

TEST(SseCutter, WholeEventsPassAtOnce) {
    SseCutter c;
    auto sent = feed(c, {"data: 1\n\n", "data: 2\n\ndata: 3\n\n"});
    EXPECT_EQ(sent, (std::vector<std::string>{"data: 1\n\n", "data: 2\n\ndata: 3\n\n"}));
    EXPECT_EQ(c.held(), 0u);
    EXPECT_TRUE(c.at_boundary());
}

TEST(SseCutter, AnUnfinishedEventWaitsForItsEnd) {
    SseCutter c;
    auto sent = feed(c, {"data: 1\n\ndata: {\"par", "tial\":1}\n", "\ndata: 3"});
    EXPECT_EQ(sent, (std::vector<std::string>{"data: 1\n\n", "", "data: {\"partial\":1}\n\n"}));
    EXPECT_EQ(c.held(), 7u);  // "data: 3"
    EXPECT_TRUE(c.at_boundary());
    EXPECT_EQ(c.flush(), "data: 3");  // the end of the stream lets it go as it is
    EXPECT_EQ(c.held(), 0u);
    EXPECT_FALSE(c.at_boundary());
}

TEST(SseCutter, CrlfBoundarySplitOverPieces) {
    SseCutter c;
    // A CR after a line end already ends the event (the LF that may follow is part of that
    // CRLF, which a client skips): the event goes out at once, the LF with the next piece.
    auto sent = feed(c, {"data: a\r\n\r", "\ndata: b\r\n", "\r\n"});
    EXPECT_EQ(sent, (std::vector<std::string>{"data: a\r\n\r", "", "\ndata: b\r\n\r\n"}));
    EXPECT_TRUE(c.at_boundary());
}

TEST(SseCutter, OneBytePieces) {
    SseCutter c;
    const std::string stream = "data: x\n\ndata: y\n\n";
    std::string out;
    for (char ch : stream) {
        std::string p(1, ch);
        c.take(p);
        out += p;
        EXPECT_TRUE(out.empty() || out.ends_with("\n\n")) << out;
    }
    EXPECT_EQ(out, stream);
}

TEST(SseCutter, AnEventOverTheCapIsPassedOnUnfinished) {
    SseCutter c(16);
    auto sent = feed(c, {"data: 0123456789", "abcdef", "\n\n"});
    EXPECT_EQ(sent, (std::vector<std::string>{"", "data: 0123456789abcdef", "\n\n"}));
    SseCutter d(16);
    feed(d, {"data: 0123456789", "abcdef"});
    EXPECT_FALSE(d.at_boundary());  // a failure now must end the half event first
    EXPECT_EQ(d.held(), 0u);
}

TEST(SseCutter, AnEventHoldingTheNeedleIsHeldUpToItsOwnCap) {
    SseCutter c(16);
    c.hold_whole_if("KEY", 64);
    // the needle split over two pieces, then the event's end: held whole, over the usual cap
    auto sent = feed(c, {"data: 01234K", "EY abcdefghij", "klm\n\n"});
    EXPECT_EQ(sent, (std::vector<std::string>{"", "", "data: 01234KEY abcdefghijklm\n\n"}));
    EXPECT_TRUE(c.at_boundary());
    // a later event without it has the usual cap again
    sent = feed(c, {"data: 0123456789", "abcdef", "\n\n"});
    EXPECT_EQ(sent, (std::vector<std::string>{"", "data: 0123456789abcdef", "\n\n"}));
    // and one with it is passed on unfinished past its own cap
    SseCutter d(16);
    d.hold_whole_if("KEY", 32);
    sent = feed(d, {"data: KEY 0123456789", "abcdefghijklmnopqrstuvwxyz"});
    EXPECT_EQ(sent.back(), "data: KEY 0123456789abcdefghijklmnopqrstuvwxyz");
    EXPECT_FALSE(d.at_boundary());
    // the needle in a whole event passed with the start of the next: that start has the usual cap
    SseCutter e(16);
    e.hold_whole_if("KEY", 64);
    sent = feed(e, {"data: x", "KEY\n\ndata: 0123456789abcdef"});
    EXPECT_EQ(sent.back(), "data: xKEY\n\n");
    sent = feed(e, {"g"});
    EXPECT_EQ(sent.back(), "data: 0123456789abcdefg");
}

// After an event over the cap went out unfinished, the line ends that close it may come in
// pieces of their own: the blank line they complete with what was passed on is an event end.
// They go out at once, and the stream is at a boundary (fuzzing found the cutter holding a
// lone "\n" and saying it was inside an event).
TEST(SseCutter, TheEndOfAnEventOverTheCapIsSeenAcrossPieces) {
    for (const auto& [last_line_end, closing] : std::vector<std::pair<std::string, std::string>>{
             {"\n", "\n"}, {"\r\n", "\r\n"}, {"\r", "\r"}, {"\n", "\r\n"}}) {
        SseCutter c(16);
        auto sent = feed(c, {"data: 0123456789abcdef" + last_line_end, closing});
        EXPECT_EQ(sent.back(), closing) << "held back instead of passed on";
        EXPECT_TRUE(c.at_boundary());
        EXPECT_EQ(c.held(), 0u);
        // and the next event passes as a whole one
        sent = feed(c, {"data: x\n\n"});
        EXPECT_EQ(sent.back(), "data: x\n\n");
        EXPECT_TRUE(c.at_boundary());
    }
    // A CR passed on, then an LF: one CRLF line end, not a blank line.
    SseCutter c(16);
    feed(c, {"data: 0123456789abcdef\r", "\n"});
    EXPECT_FALSE(c.at_boundary());
    EXPECT_EQ(c.held(), 1u);
}

}  // namespace
}  // namespace pdr
