#pragma once
// The decode leg shared by every flow: pick a decode instance, send it the body, and relay its
// answer. A connect failure before the request was sent is retried on another decode instance
// (cfg.decode_retries times) with the same body, i.e. the same KV handle.
#include "router/disagg/flow.hpp"
#include "router/disagg/relay.hpp"

namespace pdr::disagg {

awaitable<void> run_decode_leg(FlowDeps& deps, FlowRequest& req, UpstreamCanceler& canceler,
                               std::string body, FirstByteHook on_first_byte);

}  // namespace pdr::disagg
