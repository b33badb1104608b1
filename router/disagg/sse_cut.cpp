#include "router/disagg/sse_cut.hpp"

#include <algorithm>

namespace pdr::disagg {

bool ends_an_sse_event(std::string_view bytes) noexcept {
    return bytes.empty() || bytes.ends_with("\n\n") || bytes.ends_with("\r\r") ||
           bytes.ends_with("\r\n\r\n");
}

std::size_t sse_events_end(std::string_view bytes) noexcept {
    std::size_t end = 0;
    for (std::string_view blank :
         {std::string_view("\n\n"), std::string_view("\r\r"), std::string_view("\r\n\r\n")}) {
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
