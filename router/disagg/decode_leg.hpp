#pragma once
// The decode leg shared by every flow: pick a decode instance, send it the body, and relay its
// answer. A connect failure before the request was sent is retried on another decode instance
// (cfg.decode_retries times) with the same body, i.e. the same KV handle.
#include "router/disagg/canceler.hpp"
#include "router/disagg/flow.hpp"
#include "router/disagg/handover.hpp"
#include "router/disagg/relay.hpp"

namespace pdr::disagg {

// `handover` is null when `body` carries no KV handle. Otherwise an attempt that could not reach
// D before the handle expires (KvHandover::valid_until) is not made: the client gets 504 rather
// than D a handle P may already have freed; and D's first byte ends the handover.
awaitable<void> run_decode_leg(FlowDeps& deps, FlowRequest& req, LegCanceler& canceler,
                               std::string body, KvHandover* handover);

// The decode leg on one given instance, with no retry on another (the LMCache flow: the KV is
// on that instance's receiver). `rewriter` (nullable) shapes D's 2xx answer.
awaitable<void> run_decode_on(FlowDeps& deps, FlowRequest& req, LegCanceler& canceler,
                              std::string body, instances::Instance& decode,
                              AnswerRewriter* rewriter);

}  // namespace pdr::disagg
