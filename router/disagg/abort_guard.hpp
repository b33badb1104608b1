#pragma once
// Frees P's blocks through the router's transfer agent (an Abort note) when a request ends,
// however it ends (a coroutine unwound by the client's departure included), while `consumed`
// (a flag the flow owns and keeps alive longer than the guard) says D did not take the KV. A
// no-op without the agent.
#include "net/upstream/client.hpp"

#include <string>

namespace pdr::kv {
class ControlAgent;
}

namespace pdr::disagg {

class AbortGuard {
public:
    AbortGuard(kv::ControlAgent* control, const bool& consumed, upstream::Endpoint prefill,
               std::string request_id, std::string transfer_id = {});
    ~AbortGuard();
    AbortGuard(const AbortGuard&) = delete;
    AbortGuard& operator=(const AbortGuard&) = delete;

    // The request never reached P: nothing to abort.
    void disarm() noexcept { armed_ = false; }

private:
    kv::ControlAgent* control_;
    const bool& consumed_;
    upstream::Endpoint prefill_;
    std::string request_id_;
    std::string transfer_id_;
    bool armed_ = true;
};

}  // namespace pdr::disagg
