#pragma once
// Child processes for the benchmark: spawn with a port file, wait for the port, read CPU time
// and peak RSS from /proc, stop with SIGTERM.
#include <sys/types.h>
#include <string>
#include <vector>

namespace pdr::bench {

class Child {
public:
    // Spawns `argv` with `--port 0 --port-file <tmp>` appended and waits (bounded) for the port.
    // stderr goes to `log_path`. Throws std::runtime_error when it does not come up.
    Child(std::vector<std::string> argv, const std::string& log_path);
    ~Child();
    Child(const Child&) = delete;
    Child& operator=(const Child&) = delete;

    unsigned short port() const { return port_; }
    pid_t pid() const { return pid_; }

    double cpu_seconds() const;   // utime + stime so far
    double peak_rss_mib() const;  // VmHWM
    void stop();

private:
    pid_t pid_ = -1;
    unsigned short port_ = 0;
    std::string port_file_;
};

}  // namespace pdr::bench
