#include "net/common/shared_state.hpp"

namespace pdr {

std::recursive_mutex& shared_state_mutex() noexcept {
    static std::recursive_mutex m;
    return m;
}

}  // namespace pdr
