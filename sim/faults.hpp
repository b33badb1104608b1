#pragma once
// Fault injection for pdsim (POST /debug/faults): one plan that applies to the next N
// completion/chat requests.
#include <optional>
#include <string>
#include <string_view>

namespace pdr::sim {

struct Fault {
    int status = 0;    // != 0: answer with this status and `body` instead
    std::string body;  // default: an OpenAI-style error object
    bool close_before_response = false;
    int close_after_chunks = -1;   // >= 0: close after N SSE events (non-stream: after the head)
    bool cut_last_event = false;   // with close_after_chunks: the Nth event is sent only half
    int delay_ms = 0;              // wait before answering
    bool omit_kv_params = false;   // prefill: answer without kv_transfer_params
    int token_delay_ms = -1;       // >= 0: per-token delay instead of the configured one
    int retry_after_s = -1;        // >= 0 with `status`: the answer carries Retry-After
    bool close_delimited = false;  // a stream is sent as an HTTP/1.0 body ended by the close
    int split_first_event_ms = 0;  // > 0: a stream's head goes out in one write with the first
                                   // half of its first event; the other half this much later
};

class FaultPlan {
public:
    // Replaces the plan with the JSON object in `body`. Returns an error message (and leaves the
    // plan unchanged) when the body is not a valid fault object.
    std::optional<std::string> set(std::string_view body);
    // The fault for the next request, if any (consumes one from the count).
    std::optional<Fault> take();
    void clear() { remaining_ = 0; }
    bool armed() const noexcept { return remaining_ != 0; }

private:
    Fault fault_;
    int remaining_ = 0;  // -1: until reset
};

}  // namespace pdr::sim
