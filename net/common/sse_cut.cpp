#include "net/common/sse_cut.hpp"

#include <algorithm>
#include <cstring>

namespace pdr {

namespace {

bool is_line_end(char c) noexcept {
    return c == '\n' || c == '\r';
}

constexpr std::size_t kNone = std::string_view::npos;

// The index of the first `c` in bytes[from, end of bytes), or bytes.size().
std::size_t find_from(std::string_view bytes, char c, std::size_t from) noexcept {
    const void* hit = std::memchr(bytes.data() + from, c, bytes.size() - from);
    return hit != nullptr ? static_cast<std::size_t>(static_cast<const char*>(hit) - bytes.data())
                          : bytes.size();
}

}  // namespace

// A blank line ends an event: a line end right after a line end, where a line end is CRLF, LF
// or CR (any mix: "\n\r\n" is LF then CRLF). CR then LF is always one CRLF, never two ends.
// From the end: the last line end, then whether the character before it ends a line too.
// The line ends are found with memrchr (vectorized in glibc: a byte-at-a-time scan back over
// each relayed event was a sixth of a stream's instructions): the last LF, then a CR after it.
// The last LF is kept until the scan passes it, so lines that end in CR alone cost no new LF
// search each (that made such input quadratic).
std::size_t sse_events_end(std::string_view bytes) noexcept {
    const char* data = bytes.data();
    std::size_t i = bytes.size();
    std::size_t lf = kNone;  // the last LF before i (kNone: none); valid once searched
    bool lf_searched = false;
    while (i > 0) {
        if (!lf_searched || (lf != kNone && lf >= i)) {
            const void* hit = ::memrchr(data, '\n', i);
            lf = hit != nullptr ? static_cast<std::size_t>(static_cast<const char*>(hit) - data)
                                : kNone;
            lf_searched = true;
        }
        const std::size_t after_lf = lf == kNone ? 0 : lf + 1;
        const void* cr = i > after_lf ? ::memrchr(data + after_lf, '\r', i - after_lf) : nullptr;
        const std::size_t p =
            cr != nullptr ? static_cast<std::size_t>(static_cast<const char*>(cr) - data) : lf;
        if (p == kNone) {
            return 0;
        }
        // The line end that ends at p + 1 starts at p, or at p - 1 when it is a CRLF.
        const std::size_t start = bytes[p] == '\n' && p > 0 && bytes[p - 1] == '\r' ? p - 1 : p;
        if (start > 0 && is_line_end(bytes[start - 1])) {
            return p + 1;
        }
        i = start;
    }
    return 0;
}

std::size_t SseLineEnds::next(std::size_t from) noexcept {
    const std::size_t n = bytes_.size();
    if (from >= n) {
        return n;
    }
    // Each kept position is searched again only once `from` has passed it: every byte is
    // looked at at most once per character, whatever the mix of line ends.
    if (!searched_ || lf_ < from) {
        lf_ = find_from(bytes_, '\n', from);
    }
    if (!searched_ || cr_ < from) {
        cr_ = find_from(bytes_, '\r', from);
    }
    searched_ = true;
    return std::min(lf_, cr_);
}

bool ends_an_sse_event(std::string_view bytes) noexcept {
    return bytes.empty() || sse_events_end(bytes) == bytes.size();  // at once when it does
}

std::string sse_data_event(std::string_view data) {
    std::string out = "data: ";
    out += data;
    out += "\n\n";
    return out;
}

namespace {

constexpr std::size_t kTail = 4;  // "\r\n\r\n": the most a blank line's end spans

}  // namespace

void SseCutter::take(std::string& piece) {
    if (piece.empty()) {
        return;
    }
    if (held_.empty() && ends_an_sse_event(piece)) {
        // the usual case: whole events, passed on as they came
        tail_.assign(piece, piece.size() - std::min(piece.size(), kTail));
        at_boundary_ = true;
        return;
    }
    const std::size_t before = held_.size();
    held_.append(piece);
    if (!needle_.empty() && !needle_held_) {
        // only the new bytes (and a needle begun before them) are looked at
        const std::size_t from = before > needle_.size() ? before - needle_.size() : 0;
        needle_held_ = held_.find(needle_, from) != std::string::npos;
    }
    std::size_t cut = sse_events_end(held_);
    if (cut == 0 && !at_boundary_) {
        cut = end_begun_before();
    }
    const std::size_t cap = needle_held_ ? std::max(max_held_, needle_max_held_) : max_held_;
    if (cut == 0 && held_.size() > cap) {
        cut = held_.size();
    }
    piece.assign(held_, 0, cut);
    held_.erase(0, cut);
    if (cut > 0 && needle_held_) {
        needle_held_ = held_.find(needle_) != std::string::npos;
    }
    passed_on(piece);
}

std::string SseCutter::flush() {
    std::string rest = std::move(held_);
    held_.clear();
    passed_on(rest);
    return rest;
}

std::size_t SseCutter::end_begun_before() const {
    if (tail_.empty()) {
        return 0;
    }
    // Only the first bytes held can complete a blank line begun before them: any later end is
    // within what is held, and sse_events_end found none.
    std::string joined = tail_;
    joined.append(held_, 0, std::min<std::size_t>(held_.size(), 2));
    const std::size_t end = sse_events_end(joined);
    return end > tail_.size() ? end - tail_.size() : 0;
}

void SseCutter::passed_on(std::string_view sent) {
    if (sent.empty()) {
        return;
    }
    // Judged on the stream so far, not on `sent` alone: a "\n" that ends an event over the cap
    // ends it only after the "\n" passed on before it.
    if (sent.size() >= kTail) {
        tail_.assign(sent.substr(sent.size() - kTail));
    } else {
        tail_.append(sent);
        tail_.erase(0, tail_.size() - std::min(tail_.size(), kTail));
    }
    at_boundary_ = ends_an_sse_event(tail_);
}

}  // namespace pdr
