// libFuzzer target for SSE cutting and the relay's stream state: the input is a decode stream
// read in pieces (each piece's length taken from the input itself), cut at event boundaries by
// SseCutter as relay.cpp does, and the whole events rewritten by the LMCache flow's
// AnswerShaper (completions and chat). What is passed on, plus the flush, must be the stream
// unchanged, and the cutter never holds more than its cap; sse_events_end and SseLineEnds
// agree with byte-at-a-time versions of themselves. Build and run: scripts/fuzz sse
// SECONDS. Seeds: corpus/sse/.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "net/common/sse_cut.hpp"
#include "router/disagg/lmcache_rewrite.hpp"

namespace {

using namespace pdr;
namespace lm = disagg::lmcache;

lm::AnswerShaper shaper(lm::Api api) {
    lm::ClientAsk ask;
    ask.api = api;
    ask.stream = true;
    ask.include_usage = true;
    lm::FirstToken first{42, "Hello", "", "model-a"};
    return lm::AnswerShaper(ask, "req-1", first, 5, 1700000000);
}

// The shapers hold no state between calls, and what they write without D's bytes (the stream's
// start, the first-token-only answers) depends on their constants alone: made once, not per
// input (those calls were a quarter of each execution).
struct Shapers {
    lm::AnswerShaper completions = shaper(lm::Api::Completions);
    lm::AnswerShaper chat = shaper(lm::Api::Chat);
    Shapers() {
        for (lm::AnswerShaper* s : {&completions, &chat}) {
            if (s->stream_start().empty() || s->first_only_whole().empty() ||
                s->first_only_stream().empty()) {
                std::abort();
            }
        }
    }
};

// The definition, independent of sse_cut.cpp: bytes end an event when they end with a blank
// line, a line end (CRLF, LF or CR) right after another; at most 4 bytes, so only the last 4
// matter (checking all that was passed on, at every piece, made long inputs quadratic).
bool ends_with_blank_line(std::string_view b) {
    if (b.empty()) {
        return true;
    }
    for (std::string_view blank :
         {"\n\n", "\n\r", "\r\r", "\n\r\n", "\r\r\n", "\r\n\n", "\r\n\r", "\r\n\r\n"}) {
        if (b.size() >= blank.size() && b.substr(b.size() - blank.size()) == blank) {
            return true;
        }
    }
    return false;
}

// sse_events_end and SseLineEnds one byte at a time, as they were before they searched with
// memrchr/memchr: the fast ones must agree with these on every input.
bool reference_line_end_char(char c) {
    return c == '\n' || c == '\r';
}

std::size_t reference_events_end(std::string_view b) {
    std::size_t i = b.size();
    while (i > 0) {
        std::size_t p = i - 1;
        while (!reference_line_end_char(b[p])) {
            if (p == 0) {
                return 0;
            }
            --p;
        }
        const std::size_t start = b[p] == '\n' && p > 0 && b[p - 1] == '\r' ? p - 1 : p;
        if (start > 0 && reference_line_end_char(b[start - 1])) {
            return p + 1;
        }
        i = start;
    }
    return 0;
}

std::size_t reference_line_end(std::string_view b, std::size_t from) {
    while (from < b.size() && !reference_line_end_char(b[from])) {
        ++from;
    }
    return std::min(from, b.size());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size < 1) {
        return 0;
    }
    // First byte: the cutter's cap (small caps reach the pass-on-anyway path).
    const std::size_t cap = 1 + data[0] % 128;
    std::string_view in(reinterpret_cast<const char*>(data) + 1, size - 1);
    static Shapers shapers;
    lm::AnswerShaper& completions = shapers.completions;
    lm::AnswerShaper& chat = shapers.chat;
    SseCutter cutter(cap);
    std::string passed, out;
    passed.reserve(in.size());
    std::size_t at = 0;
    while (at < in.size()) {
        // Piece lengths 1..16 from the bytes themselves: a stable split for a given input.
        const std::size_t n = std::min<std::size_t>(in.size() - at, 1 + (in[at] & 0x0f));
        std::string piece(in.substr(at, n));
        at += n;
        cutter.take(piece);
        if (cutter.held() > cap + 16) {
            std::abort();
        }
        passed += piece;
        if (cutter.at_boundary() != ends_with_blank_line(passed) ||
            ends_an_sse_event(piece) != ends_with_blank_line(piece) ||
            sse_events_end(piece) != reference_events_end(piece)) {
            std::abort();
        }
        if (!piece.empty() && ends_an_sse_event(piece)) {
            out.clear();
            completions.stream_events(piece, out);
            out.clear();
            chat.stream_events(piece, out);
        }
    }
    passed += cutter.flush();
    if (passed != in || cutter.held() != 0) {
        std::abort();
    }
    if (sse_events_end(in) != reference_events_end(in)) {
        std::abort();
    }
    SseLineEnds line_ends(in);
    for (std::size_t from = 0; from <= in.size();) {  // every line of the input
        const std::size_t end = line_ends.next(from);
        if (end != reference_line_end(in, from)) {
            std::abort();
        }
        from = end + 1;
    }
    out.clear();
    completions.whole(in, out);
    out.clear();
    chat.whole(in, out);
    return 0;
}
