#include "router/disagg/sse_cut.hpp"

#include <algorithm>

namespace pdr::disagg {

namespace {

// A blank line ends an event: a line end right after a line end, where a line end is CRLF, LF
// or CR (any mix: "\n\r\n" is LF then CRLF). CR then LF is always one CRLF, never two ends.
constexpr std::string_view kBlankLines[] = {"\n\n",   "\n\r",   "\r\r",   "\n\r\n",
                                            "\r\r\n", "\r\n\n", "\r\n\r", "\r\n\r\n"};

}  // namespace

bool ends_an_sse_event(std::string_view bytes) noexcept {
    if (bytes.empty()) {
        return true;
    }
    for (std::string_view blank : kBlankLines) {
        if (bytes.ends_with(blank)) {
            return true;
        }
    }
    return false;
}

std::size_t sse_events_end(std::string_view bytes) noexcept {
    std::size_t end = 0;
    for (std::string_view blank : kBlankLines) {
        if (const std::size_t at = bytes.rfind(blank); at != std::string_view::npos) {
            end = std::max(end, at + blank.size());
        }
    }
    return end;
}

void SseCutter::take(std::string& piece) {
    if (piece.empty()) {
        return;
    }
    if (held_.empty() && ends_an_sse_event(piece)) {
        at_boundary_ = true;  // the usual case: whole events, passed on as they came
        return;
    }
    held_.append(piece);
    std::size_t cut = sse_events_end(held_);
    if (cut == 0 && held_.size() > max_held_) {
        cut = held_.size();
    }
    piece.assign(held_, 0, cut);
    held_.erase(0, cut);
    passed_on(piece);
}

std::string SseCutter::flush() {
    std::string rest = std::move(held_);
    held_.clear();
    passed_on(rest);
    return rest;
}

void SseCutter::passed_on(std::string_view sent) {
    if (!sent.empty()) {
        at_boundary_ = ends_an_sse_event(sent);
    }
}

}  // namespace pdr::disagg
