#pragma once
// Child processes for the benchmark: spawn with a port file, wait for the port, read CPU time
// and peak RSS from /proc, stop with SIGTERM.
#include <sys/types.h>
#include <functional>
#include <string>
#include <vector>

namespace pdr::bench {

class Child {
public:
    // Spawns `argv` with `--port 0 --port-file <tmp>` appended and waits (bounded) for the port.
    // stderr goes to `log_path`. Throws std::runtime_error when it does not come up.
    Child(std::vector<std::string> argv, const std::string& log_path);
    // Spawns `argv` as it is (a program that listens on `port` it was told in its own way, such
    // as nginx) and waits (bounded) until a TCP connect to 127.0.0.1:`port` succeeds.
    Child(std::vector<std::string> argv, const std::string& log_path, unsigned short port);
    ~Child();
    Child(const Child&) = delete;
    Child& operator=(const Child&) = delete;

    unsigned short port() const { return port_; }
    pid_t pid() const { return pid_; }

    double cpu_seconds() const;   // CPU time of all its threads so far (schedstat, ns)
    double peak_rss_mib() const;  // VmHWM
    void stop();

private:
    void spawn(std::vector<std::string> argv, const std::string& log_path);
    // Polls `ready` every 10 ms for up to 15 s; throws if the child exits or time runs out.
    void wait_ready(const std::string& program, const std::string& log_path,
                    const std::string& timeout_message, const std::function<bool()>& ready);

    pid_t pid_ = -1;
    unsigned short port_ = 0;
    std::string port_file_;
};

// A TCP port on 127.0.0.1 that was free a moment ago (bind to port 0, read it, close).
unsigned short free_port();

}  // namespace pdr::bench
