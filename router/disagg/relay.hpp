#pragma once
// Relays the decode instance's answer to the client: SSE streams piece by piece as they arrive
// (never accumulated), whole answers with D's status, content type and body, and D's error
// answers unchanged. A failure after the stream has started becomes one SSE error event
// (no [DONE]) and the client connection is closed.
#include "router/disagg/flow.hpp"
#include "router/disagg/handover.hpp"

namespace pdr::disagg {

// Cancelled: the flow closed the decode stream itself (LegCanceler::cancel_all, e.g. the push
// flow when P failed): nothing was counted as a disconnect, and the client has not been told.
enum class RelayEnd { Complete, UpstreamFailed, ClientGone, Cancelled };

// Changes D's 2xx answer on its way to the client (the LMCache flow: D answers a completion on
// token ids, the client gets its own shape with P's first token first). D's error answers are
// relayed as they are.
class AnswerRewriter {
public:
    virtual ~AnswerRewriter() = default;
    // D's whole answer → the client's body (application/json). False: D's answer is not what
    // the flow asked for (the client gets a 502).
    virtual bool whole(std::string_view d_answer, std::string& out) = 0;
    // Events that go out before D's first.
    virtual std::string stream_start() = 0;
    // Whole events from D → the client's events. False: an event cannot be converted (the
    // stream ends with an error event).
    virtual bool stream_events(std::string_view events, std::string& out) = 0;
};

// `handover` (nullable): told of D's first body byte (or of the whole answer, for an empty
// body). `rewriter` (nullable): changes D's 2xx answer.
awaitable<RelayEnd> relay_answer(FlowDeps& deps, FlowRequest& req, upstream::ResponseStream& up,
                                 const instances::Instance& decode, FirstByteSink* handover,
                                 AnswerRewriter* rewriter = nullptr);

}  // namespace pdr::disagg
