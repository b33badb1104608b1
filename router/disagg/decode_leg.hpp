#pragma once
// The decode leg shared by every flow: pick a decode instance, send it the body, and relay its
// answer. A connect failure before the request was sent is retried on another decode instance
// (cfg.decode_retries times) with the same body, i.e. the same KV handle.
#include "router/disagg/flow.hpp"
#include "router/disagg/relay.hpp"

namespace pdr::disagg {

// When `body` carries a KV handle, `handle_valid_until` says until when P holds its blocks (the
// lease, pushed forward by acknowledged refreshes). An attempt that could not reach D before then
// is not made: the client gets 504 rather than D a handle P may already have freed.
using HandleDeadline = Clock::time_point (*)(void* ctx);
struct HandleValidity {
    HandleDeadline until = nullptr;  // null: the body carries no handle
    void* ctx = nullptr;
};

awaitable<void> run_decode_leg(FlowDeps& deps, FlowRequest& req, UpstreamCanceler& canceler,
                               std::string body, FirstByteHook on_first_byte,
                               HandleValidity handle = {});

}  // namespace pdr::disagg
