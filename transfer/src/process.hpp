#pragma once
// Same-host liveness of a peer's process. A descriptor carries its agent's pid, the process
// start time and its pid namespace (wire.hpp ProcessId); a ProcessWatch opened on them holds a
// pidfd that becomes readable when that very process ends (a reused pid has another start
// time), so a peer that dies is seen at once, without waiting for missed heartbeats.
#include <cstdint>
#include <string>

#include "wire.hpp"

namespace pdx::detail {

// This process: pid, start time (/proc/self/stat field 22) and pid namespace inode.
ProcessId self_process();

class ProcessWatch {
public:
    enum class State {
        Unknown,  // not checkable: another host or pid namespace, no pid, or no pidfd support
        Running,  // watched: fd() becomes readable when the process ends
        Ended,    // that process no longer runs (its pid is gone or now names another process)
    };
    ProcessWatch() = default;
    // Watches `peer` if it lives in `self`'s pid namespace (the caller checks the host).
    static ProcessWatch open(const ProcessId& peer, const ProcessId& self);
    ~ProcessWatch();
    ProcessWatch(ProcessWatch&& o) noexcept;
    ProcessWatch& operator=(ProcessWatch&& o) noexcept;
    ProcessWatch(const ProcessWatch&) = delete;
    ProcessWatch& operator=(const ProcessWatch&) = delete;

    State state() const { return state_; }
    int fd() const { return fd_; }  // -1 unless Running
    // One poll() of the pidfd (a syscall: 0.3-4 us here): true once the process has ended.
    bool ended();
    void close();
    const std::string& what() const { return what_; }  // e.g. "pid 1234"

private:
    State state_ = State::Unknown;
    int fd_ = -1;
    std::string what_;
};

}  // namespace pdx::detail
