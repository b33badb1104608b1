#pragma once
// Fault injection for pdsim (POST /debug/faults): one plan that applies to the next N
// completion/chat requests.
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace pdr::sim {

// Kinds of malformed "KV ready" messages a prefill can send besides the real notifications
// (fault `lmcache_notif_garbage`). None of them names the request's id as a string.
enum class NotifGarbage {
    NotMsgpack,      // bytes that do not decode as msgpack
    NonMap,          // valid msgpack, not a map (a list)
    NoReqId,         // {"type": "ProxyNotif"}
    ReqIdNotString,  // {"type": "ProxyNotif", "req_id": 12345}
    Multipart,       // a two-frame message whose first frame is a valid notification map
    Huge,            // one valid notification map of ~8 MiB (a padding field), id "garbage-huge"
};
std::string_view to_string(NotifGarbage g) noexcept;

// LMCache-mode faults of a prefill (docs/pdsim.md, "LMCache mode").
struct LmcacheFault {
    std::vector<int> drop_notif_ranks;        // P ranks whose notification is not sent
    int notif_delay_ms = 0;                   // > 0: answer first, notify this much later
    bool notif_early = false;                 // notify before moving KV and before answering
    bool notif_duplicate = false;             // every notification is sent twice
    std::vector<NotifGarbage> notif_garbage;  // sent before the notifications
    bool fail_after_notif = false;            // move KV, notify, then answer 500
    std::vector<int> skip_kv_ranks;           // D ranks that get no KV
    std::vector<int> corrupt_kv_ranks;        // D ranks that get KV with one byte wrong
};

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
    LmcacheFault lmcache;
    // KV over the transfer core (docs/pdsim.md, "Faults").
    int kv_write_delay_ms = 0;      // push, prefill: wait this long before writing to D
    int kv_register_delay_ms = 0;   // push, decode: wait this long before registering with P
    int kv_hold_after_ms = 0;       // push, decode: hold this long after P's Done or Failed
    bool kv_corrupt_block = false;  // prefill: one byte of one held block is wrong
    bool kv_answer_pull = false;    // push, prefill: answer a pull handle (transfer_mode "pull")
    bool kv_answer_push = false;    // pull, prefill: answer a push handle (transfer_mode "push")
    // push, prefill: the write fails without being made, and its Failed reaches only the
    // router's control peer (the decode's copy is lost): only the router can end D's wait.
    bool kv_failed_to_router_only = false;
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
