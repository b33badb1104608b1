#pragma once
// Closes the upstream streams a request has open when its client goes away, or when the flow
// gives up on them itself (cancel_all: push mode runs P's and D's legs at once, and one failing
// ends the other). A stream is registered while it is open: a Registration removes it again.
// The state is shared with the client-gone callback, so a callback that runs late is harmless.
#include "net/server/http_server.hpp"
#include "net/upstream/client.hpp"

#include <memory>
#include <vector>

namespace pdr::disagg {

class LegCanceler {
public:
    explicit LegCanceler(server::Exchange& ex);
    ~LegCanceler();
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
    // before the stream). A stream added after the client went away is cancelled at once.
    [[nodiscard]] Registration add(upstream::ResponseStream& stream);
    // Cancels every registered stream now (their reads complete with Failure::Canceled).
    void cancel_all() noexcept;
    // The client went away.
    bool gone() const noexcept;
    std::size_t open() const noexcept;

private:
    struct State {
        std::vector<upstream::ResponseStream*> streams;
        bool gone = false;
        void cancel_all() noexcept;
    };
    std::shared_ptr<State> state_;
};

}  // namespace pdr::disagg
