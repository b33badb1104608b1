#pragma once
// Cuts a relayed SSE stream at event boundaries (a blank line: "\n\n", "\r\n\r\n" or "\r\r").
// Bytes of an event that has not ended yet are held back until it ends, so a decode that fails
// inside an event never shows the client a truncated event: the held part is dropped and the
// error event follows a clean boundary. Engines write whole events, so in normal running nothing
// is held and nothing is delayed. An "event" longer than the cap (or a stream that is not SSE)
// is passed on anyway once the cap is reached, and the rest at the end of the stream. No I/O.
// Also the framing of the events the router and pdsim write themselves (sse_data_event).
#include <cstddef>
#include <string>
#include <string_view>

namespace pdr {

// True when `bytes` ends with a blank line (or is empty).
bool ends_an_sse_event(std::string_view bytes) noexcept;

// Length of the longest prefix of `bytes` that ends with a blank line; 0 when none.
std::size_t sse_events_end(std::string_view bytes) noexcept;

// The ends of the lines of `bytes` (which must outlive it), taken in order: next(from) is the
// index of the first CR or LF at or after `from`, or bytes.size(). Calls with growing `from`
// scan the bytes about twice in all (memchr for the next LF and the next CR, each kept until
// passed), however the lines end.
class SseLineEnds {
public:
    explicit SseLineEnds(std::string_view bytes) noexcept : bytes_(bytes) {}
    std::size_t next(std::size_t from) noexcept;

private:
    std::string_view bytes_;
    std::size_t lf_ = 0;  // the next LF at or after the last `from` (bytes_.size(): none)
    std::size_t cr_ = 0;  // the same for CR
    bool searched_ = false;
};

// One event of one data line: "data: <data>\n\n" (`data`, e.g. a JSON text, has no line end).
std::string sse_data_event(std::string_view data);

class SseCutter {
public:
    static constexpr std::size_t kDefaultMaxHeld = 64 * 1024;

    explicit SseCutter(std::size_t max_held = kDefaultMaxHeld) : max_held_(max_held) {}

    // `piece` holds bytes just read; on return it holds the bytes to send now (possibly none).
    void take(std::string& piece);
    // An unfinished event that holds `needle` is held up to `max_held` bytes instead (an event
    // the caller must see whole to change it, such as one carrying a long KV handle).
    void hold_whole_if(std::string_view needle, std::size_t max_held) {
        needle_.assign(needle);
        needle_max_held_ = max_held;
    }
    // End of the stream: everything still held (an unfinished last event), to send as it is.
    std::string flush();
    std::size_t held() const noexcept { return held_.size(); }
    // Whether the bytes passed on so far end at an event boundary (true before any).
    bool at_boundary() const noexcept { return at_boundary_; }

private:
    void passed_on(std::string_view sent);
    // Where what is held ends a blank line begun in what was already passed on (after an event
    // over the cap went out unfinished, its closing "\n" may come alone); 0 when it does not.
    std::size_t end_begun_before() const;

    std::size_t max_held_;
    std::string needle_;               // hold_whole_if
    std::size_t needle_max_held_ = 0;  // the cap for an event that holds needle_
    bool needle_held_ = false;         // held_ holds needle_
    std::string held_;
    std::string tail_;  // the last bytes passed on: at most 4, all a blank line's end needs
    bool at_boundary_ = true;
};

}  // namespace pdr
