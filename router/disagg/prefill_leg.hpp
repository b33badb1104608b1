#pragma once
// The prefill leg (PROTOCOLS.md §2): send P the prefill body (max_tokens 1, no stream, the KV
// request) and take its KV handle. A P that cannot be reached, times out, answers 5xx or
// answers something that is not JSON is reported and the leg is retried on another P
// (cfg.prefill_retries); P's 4xx goes to the client as it is.
#include "router/disagg/attempts.hpp"
#include "router/disagg/flow.hpp"

namespace pdr::disagg {

enum class PrefillEnd {
    Handle,     // P answered a KV handle: `handle` and `prefill` are set
    Recompute,  // P answered without one and the config says decode recomputes the prompt
    Answered,   // the client has been answered (an error), or is gone
};

// The prefill attempts are used up (or none could be made): 503 when no P was healthy at all,
// else the last attempt's error (`last_errc`), with one log line.
awaitable<void> respond_prefill_attempts_used(FlowDeps& deps, FlowRequest& req,
                                              const InstanceAttempts& tries, Errc last_errc);

awaitable<PrefillEnd> run_prefill_leg(FlowDeps& deps, FlowRequest& req, std::string body,
                                      KvHandle& handle, instances::InstancePtr& prefill);

}  // namespace pdr::disagg
