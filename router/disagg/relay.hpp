#pragma once
// Relays the decode instance's answer to the client: SSE streams piece by piece as they arrive
// (never accumulated), whole answers with D's status, content type and body, and D's error
// answers unchanged. A failure after the stream has started becomes one SSE error event
// (no [DONE]) and the client connection is closed.
#include "router/disagg/flow.hpp"

#include <functional>

namespace pdr::disagg {

enum class RelayEnd { Complete, UpstreamFailed, ClientGone };

// Called once, when the first body byte of D's answer arrives (or the whole answer, for an
// empty body).
struct FirstByteHook {
    void (*fn)(void* ctx) = nullptr;
    void* ctx = nullptr;
    void operator()() const {
        if (fn != nullptr) {
            fn(ctx);
        }
    }
};

awaitable<RelayEnd> relay_answer(FlowDeps& deps, FlowRequest& req, upstream::ResponseStream& up,
                                 const instances::Instance& decode, FirstByteHook on_first_byte);

}  // namespace pdr::disagg
