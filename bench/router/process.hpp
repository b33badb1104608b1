#pragma once
// Child processes for the benchmark: spawn with a port file, wait for the port, read CPU time
// and peak RSS from /proc, stop with SIGTERM.
#include <sys/types.h>
#include <cstddef>
#include <cstdint>
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

    double cpu_seconds() const;    // CPU time of all its threads so far (schedstat, ns)
    double peak_rss_mib() const;   // VmHWM
    double rss_mib() const;        // VmRSS now
    std::size_t open_fds() const;  // entries in /proc/<pid>/fd
    bool running() const;          // not exited (reaps it when it has)
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

// A loopback port for a process that must be told its port (net/common/loopback_port.hpp).
unsigned short free_port();

// One blocking HTTP/1.1 exchange with 127.0.0.1:`port` (the debug APIs of the processes under
// test), bounded by 5 s. status 0: no answer (refused, closed, timed out).
struct HttpAnswer {
    int status = 0;
    std::string body;
};
HttpAnswer http_call(unsigned short port, const std::string& method, const std::string& target,
                     const std::string& body = {});

// A number field of a flat JSON object's text, such as pdsim's /debug/state (0 when absent).
std::uint64_t json_number(const std::string& body, const std::string& field);

}  // namespace pdr::bench
