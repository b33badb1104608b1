#include "router/disagg/abort_guard.hpp"

#include "router/kv/control_agent.hpp"

namespace pdr::disagg {

AbortGuard::AbortGuard(kv::ControlAgent* control, const bool& consumed, upstream::Endpoint prefill,
                       std::string request_id, std::string transfer_id)
    : control_(control),
      consumed_(consumed),
      prefill_(std::move(prefill)),
      request_id_(std::move(request_id)),
      transfer_id_(std::move(transfer_id)) {
    if (control_ != nullptr) {
        control_->prepare(prefill_);  // so that the Abort, if any, goes out at once
    }
}

AbortGuard::~AbortGuard() {
    if (control_ != nullptr && armed_ && !consumed_) {
        control_->abort(prefill_, std::move(request_id_), std::move(transfer_id_));
    }
}

}  // namespace pdr::disagg
