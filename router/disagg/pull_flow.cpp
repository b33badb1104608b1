#include "router/disagg/pull_flow.hpp"

#include "router/disagg/abort_guard.hpp"
#include "router/disagg/decode_leg.hpp"
#include "router/disagg/prefill_leg.hpp"
#include "router/disagg/push_rewrite.hpp"
#include "router/kv/control_agent.hpp"

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
    // With the transfer agent, P learns the router's descriptor (its control peer) here.
    std::string prefill_body;
    if (deps.control != nullptr) {
        prefill_body =
            make_prefill_body(req.body, prefill_kv_request({}, deps.control->descriptor_base64()));
    } else {
        prefill_body = make_prefill_body(req.body);
    }
    const PrefillEnd end =
        co_await run_prefill_leg(deps, req, std::move(prefill_body), handle, prefill);
    if (end == PrefillEnd::Answered) {
        co_return;
    }
    if (end == PrefillEnd::Recompute) {
        deps.metrics.recomputes.Increment();
        co_await run_decode_leg(deps, req, canceler, make_plain_decode_body(req.raw_body), nullptr);
        co_return;
    }

    // P's side-channel host as D should reach it (--rewrite-kv-host).
    if (deps.cfg.rewrite_kv_host != config::RewriteKvHost::Never &&
        rewrite_kv_host(handle.params, prefill->endpoint.host,
                        deps.cfg.rewrite_kv_host == config::RewriteKvHost::Always)) {
        deps.metrics.kv_host_rewrites.Increment();
    }

    // 2. Handover: P's blocks stay leased until D's first byte, and are let go when the decode
    // leg ends (vLLM's D frees them once it read them, or when its request is cancelled).
    std::string p_request_id =
        handle.remote_request_id.empty() ? req.request_id : handle.remote_request_id;
    // D never answers (unreachable, timed out, the client left first, shutdown): the transfer
    // agent frees P's blocks then rather than one lease later. (A D that answered, even with an
    // error, frees them itself, as vLLM's does.)
    KvHandover handover(
        deps.lease_keeper.hold(p_request_id, prefill->endpoint, prefill->upstream_key),
        deps.metrics, deps.cfg.kv_lease_timeout);
    AbortGuard abort_unless_answered(deps.control, handover.began(), prefill->endpoint,
                                     p_request_id);

    // 3. Decode: D reads the blocks with the handle and streams the answer to the client.
    std::string decode_body = make_decode_body(req.raw_body, handle.params);
    handle.params = std::string();
    co_await run_decode_leg(deps, req, canceler, std::move(decode_body), &handover);
}

}  // namespace pdr::disagg
