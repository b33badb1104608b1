#include "router/disagg/attempts.hpp"

#include "net/common/shared_state.hpp"

#include <algorithm>

namespace pdr::disagg {

InstanceAttempts::InstanceAttempts(instances::Registry& registry, Role role, int retries,
                                   instances::PickHint hint,
                                   bool (*usable)(const instances::Instance&)) noexcept
    : registry_(registry),
      role_(role),
      attempts_(1 + std::max(0, retries)),
      usable_(usable),
      hint_(hint) {}

instances::InstancePtr InstanceAttempts::next() {
    in_flight_.release();
    if (tried_ >= attempts_) {
        return nullptr;
    }
    // Picked and counted in flight in one step: another worker thread could otherwise pick the
    // same instance on trial in between, or an admin remove prune it.
    const SharedLock lock;
    instances::InstancePtr inst = registry_.pick(role_, exclude_, usable_, hint_);
    if (inst) {
        ++tried_;
        in_flight_ = registry_.acquire(inst, hint_.weight);
    }
    return inst;
}

void InstanceAttempts::failed(std::string error) {
    exclude_ = in_flight_.instance().get();
    last_error_ = std::move(error);
    last_failed_ = exclude_ != nullptr ? exclude_->name : std::string();
}

}  // namespace pdr::disagg
