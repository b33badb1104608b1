#pragma once
// PullFlow (vLLM NixlConnector, PROTOCOLS.md §2): prefill leg → KV handle → decode leg with the
// handle verbatim, while the LeaseKeeper keeps P's blocks alive until D's first byte.
#include "router/disagg/flow.hpp"

namespace pdr::disagg {

awaitable<void> run_pull_flow(FlowDeps& deps, FlowRequest& req);

}  // namespace pdr::disagg
