#include "router/disagg/run_flow.hpp"

#include "router/disagg/direct_flow.hpp"
#include "router/disagg/lmcache_flow.hpp"
#include "router/disagg/prompt.hpp"
#include "router/disagg/pull_flow.hpp"
#include "router/disagg/push_flow.hpp"

namespace pdr::disagg {

awaitable<void> run_flow(FlowDeps& deps, FlowRequest& req) {
    const PromptSize prompt = measure_prompt(req.body);
    req.prefill_hint = prefill_hint(prompt, deps.cfg);
    // Selective disaggregation: a short prompt costs D little to prefill itself; with
    // --fallback-direct, no prefill instance up means D serves alone rather than a 503.
    if (is_short_prompt(prompt, deps.cfg)) {
        deps.metrics.direct_request(metrics::DirectReason::ShortPrompt);
        co_await run_direct_flow(deps, req);
        co_return;
    }
    if (deps.cfg.fallback_direct && deps.registry.count(Role::Prefill, true) == 0) {
        deps.metrics.direct_request(metrics::DirectReason::NoPrefill);
        co_await run_direct_flow(deps, req);
        co_return;
    }
    switch (deps.cfg.kv_mode) {
        case config::KvMode::Pull:
            co_await run_pull_flow(deps, req);
            co_return;
        case config::KvMode::Push:
            co_await run_push_flow(deps, req);
            co_return;
        case config::KvMode::Lmcache:
            co_await run_lmcache_flow(deps, req);
            co_return;
    }
    // Config parsing admits only the modes above.
    co_await respond_error(req.exchange, Errc::Internal, "unknown KV mode");
}

}  // namespace pdr::disagg
