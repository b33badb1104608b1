#pragma once
// Push mode (PROTOCOLS.md §4, vLLM NixlPushConnector): P's and D's legs go out at once; D
// registers its blocks with P, P writes its KV into them when its prefill ends, and D's answer is
// relayed while P's is drained and checked.
#include "router/disagg/flow.hpp"

namespace pdr::disagg {

awaitable<void> run_push_flow(FlowDeps& deps, FlowRequest& req);

// A prefill instance the push flow can use: it has its KV coordinates (an engine id).
bool has_push_coords(const instances::Instance& p);

}  // namespace pdr::disagg
