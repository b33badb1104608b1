#include "router/disagg/canceler.hpp"

#include <algorithm>

namespace pdr::disagg {

void LegCanceler::State::cancel_all() noexcept {
    // Cancelling may run code that unregisters: work on a copy.
    const std::vector<upstream::ResponseStream*> now = streams;
    for (upstream::ResponseStream* s : now) {
        s->cancel();
    }
}

LegCanceler::LegCanceler(server::Exchange& ex) : state_(std::make_shared<State>()) {
    std::weak_ptr<State> weak = state_;
    ex.on_client_gone([weak] {
        if (auto s = weak.lock()) {
            s->gone = true;
            s->cancel_all();
        }
    });
}

LegCanceler::~LegCanceler() {
    state_->streams.clear();
}

LegCanceler::Registration::~Registration() {
    if (owner_ != nullptr) {
        auto& v = owner_->state_->streams;
        v.erase(std::remove(v.begin(), v.end(), stream_), v.end());
    }
}

LegCanceler::Registration LegCanceler::add(upstream::ResponseStream& stream) {
    state_->streams.push_back(&stream);
    if (state_->gone) {
        stream.cancel();
    }
    return Registration(this, &stream);
}

void LegCanceler::cancel_all() noexcept {
    state_->cancel_all();
}

bool LegCanceler::gone() const noexcept {
    return state_->gone;
}

std::size_t LegCanceler::open() const noexcept {
    return state_->streams.size();
}

}  // namespace pdr::disagg
