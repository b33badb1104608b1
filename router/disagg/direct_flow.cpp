#include "router/disagg/direct_flow.hpp"

#include "router/disagg/decode_leg.hpp"

namespace pdr::disagg {

awaitable<void> run_direct_flow(FlowDeps& deps, FlowRequest& req) {
    deps.metrics.flow_started(metrics::FlowMode::Direct);
    LegCanceler canceler;
    co_await run_decode_leg(deps, req, canceler, make_plain_decode_body(req.raw_body), nullptr);
}

}  // namespace pdr::disagg
