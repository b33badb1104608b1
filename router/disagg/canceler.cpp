#include "router/disagg/canceler.hpp"

#include <algorithm>

namespace pdr::disagg {

LegCanceler::Registration::~Registration() {
    if (owner_ != nullptr) {
        auto& v = owner_->streams_;
        v.erase(std::remove(v.begin(), v.end(), stream_), v.end());
    }
}

LegCanceler::Registration LegCanceler::add(upstream::ResponseStream& stream) {
    streams_.push_back(&stream);
    return Registration(this, &stream);
}

void LegCanceler::cancel_all() noexcept {
    // Cancelling may run code that unregisters: work on a copy.
    const std::vector<upstream::ResponseStream*> now = streams_;
    for (upstream::ResponseStream* s : now) {
        s->cancel();
    }
}

}  // namespace pdr::disagg
