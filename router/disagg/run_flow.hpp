#pragma once
// The seam between the API and the KV modes: run_flow() serves one validated generation request
// with the flow of the configured --kv-mode. Each flow is one coroutine file that reads top to
// bottom and is built from the shared legs:
//
//   pull_flow.cpp    vLLM NixlConnector: prefill leg, KV handover (lease kept), decode leg
//   lmcache_flow.cpp LMCache PD: tokenize, prefill with D's receiver, wait for the ZMQ KV-ready
//                    notifications, decode on token ids (lmcache_rewrite.cpp shapes the answer)
//   direct_flow.cpp  no disaggregation: the request straight to a decode instance
//   (a new mode: <mode>_flow.cpp, a KvMode value in config/config.hpp, a case below)
//
//   prefill_leg.cpp  P's leg with retries on another P     attempts.cpp  the one retry rule
//   decode_leg.cpp   D's leg with retries on another D     relay.cpp     D's answer to the client
//   handover.cpp     P's KV between the legs (lease)       canceler.cpp  streams to close
#include "router/disagg/flow.hpp"

namespace pdr::disagg {

awaitable<void> run_flow(FlowDeps& deps, FlowRequest& req);

}  // namespace pdr::disagg
