#pragma once
// DirectFlow: no disaggregation. The client's request goes to a decode instance as it came
// (selective disaggregation and the no-prefill fallback choose it; see run_flow.hpp).
#include "router/disagg/flow.hpp"

namespace pdr::disagg {

awaitable<void> run_direct_flow(FlowDeps& deps, FlowRequest& req);

}  // namespace pdr::disagg
