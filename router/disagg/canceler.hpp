#pragma once
// Closes the upstream streams a request has open when the flow gives up on them itself
// (cancel_all: a flow that runs P's and D's legs at once ends the other when one fails). A
// stream is registered while it is open: a Registration removes it again.
//
// A client that goes away does not come through here. The server cancels the handler's
// coroutine (its one signal for that, see net/server/http_server.hpp): the leg's pending
// upstream connect or read completes with Failure::Canceled and closes its connection
// (net/upstream honours per-operation cancellation), and the next co_await throws, so the
// unwinding destroys, and closes, every stream still open.
#include "net/upstream/client.hpp"

#include <vector>

namespace pdr::disagg {

class LegCanceler {
public:
    LegCanceler() = default;
    LegCanceler(const LegCanceler&) = delete;
    LegCanceler& operator=(const LegCanceler&) = delete;

    class Registration {
    public:
        Registration(Registration&& o) noexcept : owner_(o.owner_), stream_(o.stream_) {
            o.owner_ = nullptr;
        }
        Registration(const Registration&) = delete;
        Registration& operator=(const Registration&) = delete;
        Registration& operator=(Registration&&) = delete;
        ~Registration();

    private:
        friend class LegCanceler;
        Registration(LegCanceler* owner, upstream::ResponseStream* stream)
            : owner_(owner), stream_(stream) {}
        LegCanceler* owner_;
        upstream::ResponseStream* stream_;
    };

    // `stream` is cancelled with the others until the Registration is destroyed (destroy it
    // before the stream and before the canceler).
    [[nodiscard]] Registration add(upstream::ResponseStream& stream);
    // Cancels every registered stream now (their reads complete with Failure::Canceled).
    void cancel_all() noexcept;
    std::size_t open() const noexcept { return streams_.size(); }

private:
    std::vector<upstream::ResponseStream*> streams_;
};

}  // namespace pdr::disagg
