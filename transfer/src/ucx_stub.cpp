// Built when PDR_WITH_UCX is OFF: the library is loopback-only.
#include "backend.hpp"

namespace pdx {
bool ucx_available() noexcept {
    return false;
}
}  // namespace pdx

namespace pdx::detail {
std::unique_ptr<Backend> make_ucx_backend(const BackendOptions&, BackendEvents&,
                                          std::string& error) {
    error = "pdx was built without UCX (PDR_WITH_UCX=OFF)";
    return nullptr;
}
}  // namespace pdx::detail
