#pragma once
// Relays the decode instance's answer to the client: SSE streams piece by piece as they arrive
// (never accumulated), whole answers with D's status, content type and body, and D's error
// answers unchanged. A failure after the stream has started becomes one SSE error event
// (no [DONE]) and the client connection is closed.
#include "router/disagg/flow.hpp"
#include "router/disagg/handover.hpp"

namespace pdr::disagg {

enum class RelayEnd { Complete, UpstreamFailed, ClientGone };

// `handover` (nullable): told of D's first body byte (or of the whole answer, for an empty
// body).
awaitable<RelayEnd> relay_answer(FlowDeps& deps, FlowRequest& req, upstream::ResponseStream& up,
                                 const instances::Instance& decode, KvHandover* handover);

}  // namespace pdr::disagg
