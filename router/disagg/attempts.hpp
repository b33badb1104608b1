#pragma once
// The one retry rule of every leg (the prefill leg, the decode leg, GET /v1/models): try up to
// 1 + retries healthy instances of one role, never the same one twice in a row, and say at the
// end why the last one failed. Whether a failure may be retried is the caller's rule.
//
//     InstanceAttempts tries(registry, Role::Decode, cfg.decode_retries);
//     while (instances::InstancePtr d = tries.next()) { ...; tries.failed(reason); continue; }
//     // no (other) instance: tries.tried() == 0 means none was healthy at all
#include "router/instances/registry.hpp"

#include <string>

namespace pdr::disagg {

class InstanceAttempts {
public:
    // `hint`: what the role's policy may know of the request (its key must outlive this).
    // `usable` (optional): only instances it accepts are tried.
    InstanceAttempts(instances::Registry& registry, Role role, int retries,
                     instances::PickHint hint = {},
                     bool (*usable)(const instances::Instance&) = nullptr) noexcept;

    // The next instance to try, with its in-flight count held until the next call or the end
    // of the attempts; null when the attempts are used up or no (other) healthy instance is
    // left.
    instances::InstancePtr next();
    // Instances handed out so far (0: there was no healthy instance at all).
    int tried() const noexcept { return tried_; }
    // The current instance is a retry (not the first one tried).
    bool is_retry() const noexcept { return tried_ > 1; }
    // The current instance is the last attempt allowed.
    bool last() const noexcept { return tried_ >= attempts_; }
    // The current instance failed: the next one will be another; `error` names what happened
    // (the client may see it: it names the instance by Instance::client_name()).
    void failed(std::string error);
    const std::string& last_error() const noexcept { return last_error_; }
    // The address (Instance::name) of the instance that failed last, for log lines.
    const std::string& last_failed() const noexcept { return last_failed_; }

private:
    instances::Registry& registry_;
    Role role_;
    int attempts_;
    bool (*usable_)(const instances::Instance&);
    instances::PickHint hint_;
    int tried_ = 0;
    instances::InFlight in_flight_;
    const instances::Instance* exclude_ = nullptr;
    std::string last_error_;
    std::string last_failed_;
};

}  // namespace pdr::disagg
