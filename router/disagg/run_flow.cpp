#include "router/disagg/run_flow.hpp"

#include "router/disagg/lmcache_flow.hpp"
#include "router/disagg/pull_flow.hpp"
#include "router/disagg/push_flow.hpp"

namespace pdr::disagg {

awaitable<void> run_flow(FlowDeps& deps, FlowRequest& req) {
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
