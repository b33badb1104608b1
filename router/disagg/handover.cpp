#include "router/disagg/handover.hpp"

namespace pdr::disagg {

void KvHandover::first_byte() {
    if (seen_) {
        return;
    }
    seen_ = true;
    hold_.first_byte();
    metrics_.kv_handover_gap.Observe(
        std::chrono::duration<double>(Clock::now() - prefill_answered_).count());
}

}  // namespace pdr::disagg
