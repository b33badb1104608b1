#pragma once
// The LMCache flow (PROTOCOLS.md §5, --kv-mode lmcache): choose a D with receiver ports, tokenize
// on P, prefill on P with a disagg_spec naming D's receiver (P sends the KV there and notifies
// the router once per TP rank over ZMQ), wait for every notification (bounded: error or proceed),
// then decode on that D with the token ids plus P's first token, shaping D's completion answer
// into the client's (P's token first; chat converted).
#include "router/disagg/flow.hpp"

namespace pdr::disagg {

awaitable<void> run_lmcache_flow(FlowDeps& deps, FlowRequest& req);

}  // namespace pdr::disagg
