#include "router/disagg/pull_flow.hpp"

#include "router/disagg/decode_leg.hpp"
#include "router/disagg/prefill_leg.hpp"

namespace pdr::disagg {

awaitable<void> run_pull_flow(FlowDeps& deps, FlowRequest& req) {
    deps.metrics.flow_started(metrics::FlowMode::Pull);
    // Both roles must be up before P does any work for a request D cannot take.
    if (deps.registry.count(Role::Prefill, true) == 0) {
        co_await respond_no_instance(deps, req, metrics::Leg::Prefill);
        co_return;
    }
    if (deps.registry.count(Role::Decode, true) == 0) {
        co_await respond_no_instance(deps, req, metrics::Leg::Decode);
        co_return;
    }
    LegCanceler canceler;

    // 1. Prefill: P computes the prompt's KV and answers a handle to it.
    KvHandle handle;
    instances::InstancePtr prefill;
    const PrefillEnd end =
        co_await run_prefill_leg(deps, req, make_prefill_body(req.body), handle, prefill);
    if (end == PrefillEnd::Answered) {
        co_return;
    }
    if (end == PrefillEnd::Recompute) {
        deps.metrics.recomputes.Increment();
        co_await run_decode_leg(deps, req, canceler, make_plain_decode_body(req.raw_body), nullptr);
        co_return;
    }

    // 2. Handover: P's blocks stay leased until D's first byte, and are let go when the decode
    // leg ends (vLLM's D frees them once it read them, or when its request is cancelled).
    std::string p_request_id =
        handle.remote_request_id.empty() ? req.request_id : handle.remote_request_id;
    KvHandover handover(deps.lease_keeper.hold(std::move(p_request_id), prefill->endpoint),
                        deps.metrics, deps.cfg.kv_lease_timeout);

    // 3. Decode: D reads the blocks with the handle and streams the answer to the client.
    std::string decode_body = make_decode_body(req.raw_body, handle.params);
    handle.params = std::string();
    co_await run_decode_leg(deps, req, canceler, std::move(decode_body), &handover);
}

}  // namespace pdr::disagg
