#include "process.hpp"

#include <poll.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <utility>

namespace pdx::detail {
namespace {

// Field 22 of /proc/<pid>/stat (clock ticks since boot); 0 if there is no such process. The
// command name (field 2) may hold spaces and parentheses: fields are counted after its last ')'.
std::uint64_t start_time(const std::string& pid) {
    std::ifstream f("/proc/" + pid + "/stat");
    std::string line;
    if (!std::getline(f, line)) {
        return 0;
    }
    const auto close = line.rfind(')');
    if (close == std::string::npos) {
        return 0;
    }
    std::istringstream rest(line.substr(close + 1));
    std::string field;
    for (int i = 3; i <= 22; ++i) {  // field 3 (state) is the first after the name
        if (!(rest >> field)) {
            return 0;
        }
    }
    return std::strtoull(field.c_str(), nullptr, 10);
}

std::uint64_t pid_namespace(const std::string& pid) {
    struct stat st {};
    if (::stat(("/proc/" + pid + "/ns/pid").c_str(), &st) != 0) {
        return 0;
    }
    return st.st_ino;
}

}  // namespace

ProcessId self_process() {
    ProcessId p;
    p.pid = static_cast<std::uint32_t>(::getpid());
    p.start_time = start_time("self");
    p.pid_ns = pid_namespace("self");
    return p;
}

ProcessWatch ProcessWatch::open(const ProcessId& peer, const ProcessId& self) {
    ProcessWatch w;
    w.what_ = "pid " + std::to_string(peer.pid);
    if (peer.pid == 0 || peer.start_time == 0 || peer.pid_ns == 0 || peer.pid_ns != self.pid_ns) {
        return w;  // Unknown
    }
    const std::string pid = std::to_string(peer.pid);
    if (start_time(pid) != peer.start_time) {
        w.state_ = State::Ended;  // gone, or the pid now names another process
        return w;
    }
    const long fd = ::syscall(SYS_pidfd_open, static_cast<pid_t>(peer.pid), 0);
    if (fd < 0) {
        return w;  // e.g. a kernel older than 5.3: heartbeats only
    }
    w.fd_ = static_cast<int>(fd);
    // The pid could have been reused between the check above and pidfd_open: check again.
    w.state_ = start_time(pid) == peer.start_time ? State::Running : State::Ended;
    if (w.state_ == State::Ended) {
        w.close();
    }
    return w;
}

ProcessWatch::~ProcessWatch() {
    close();
}

ProcessWatch::ProcessWatch(ProcessWatch&& o) noexcept
    : state_(o.state_), fd_(std::exchange(o.fd_, -1)), what_(std::move(o.what_)) {
    o.state_ = State::Unknown;
}

ProcessWatch& ProcessWatch::operator=(ProcessWatch&& o) noexcept {
    if (this != &o) {
        close();
        state_ = std::exchange(o.state_, State::Unknown);
        fd_ = std::exchange(o.fd_, -1);
        what_ = std::move(o.what_);
    }
    return *this;
}

bool ProcessWatch::ended() {
    if (state_ == State::Running) {
        pollfd p{fd_, POLLIN, 0};
        if (::poll(&p, 1, 0) > 0) {
            state_ = State::Ended;
        }
    }
    return state_ == State::Ended;
}

void ProcessWatch::close() {
    if (fd_ >= 0) {
        ::close(fd_);
        fd_ = -1;
    }
}

}  // namespace pdx::detail
