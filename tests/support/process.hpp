#pragma once
// Child processes for integration tests: spawn an executable (fork+exec; the child gets SIGKILL
// if the test process dies) with its stdout+stderr going to a log file, wait for the port file it
// writes, stop it with SIGTERM then SIGKILL after a bound.
#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace pdr::test {

using Ms = std::chrono::milliseconds;

// $PDR_BUILD_DIR (set by pdr_add_test); empty when missing.
std::string build_dir();
std::string pdrouter_path();  // $PDR_BUILD_DIR/router/pdrouter
std::string pdsim_path();     // $PDR_BUILD_DIR/sim/pdsim

// A fresh directory under $TMPDIR (or /tmp), removed with its contents on destruction.
class TempDir {
public:
    TempDir();
    ~TempDir();
    TempDir(const TempDir&) = delete;
    TempDir& operator=(const TempDir&) = delete;
    const std::string& path() const noexcept { return path_; }
    std::string file(const std::string& name) const { return path_ + "/" + name; }

private:
    std::string path_;
};

struct ExitStatus {
    bool exited = false;  // false: still running (wait timed out)
    int code = -1;        // exit code when the process exited normally
    int signal = 0;       // the signal that ended it, else 0
};

class Process {
public:
    // Starts `exe args...` with stdin from /dev/null and stdout+stderr appended to `log_path`
    // (stderr to `stderr_path` instead when that is given).
    // Returns nullopt (and sets `error`) when the spawn itself fails.
    static std::optional<Process> spawn(const std::string& exe,
                                        const std::vector<std::string>& args,
                                        const std::string& log_path, std::string& error,
                                        const std::string& stderr_path = {});

    Process(Process&& other) noexcept;
    Process& operator=(Process&& other) noexcept;
    Process(const Process&) = delete;
    Process& operator=(const Process&) = delete;
    ~Process();

    pid_t pid() const noexcept { return pid_; }
    bool running();
    // Waits up to `timeout` for the process to end on its own.
    ExitStatus wait(Ms timeout);
    // SIGTERM, wait up to `grace`, then SIGKILL. Idempotent.
    ExitStatus stop(Ms grace = Ms{3000});
    void kill_now();  // SIGKILL and reap
    void signal(int sig);

    const std::string& log_path() const noexcept { return log_path_; }
    std::string log() const;  // the log file's content so far
    std::string command_line() const { return command_line_; }

private:
    Process() = default;
    pid_t pid_ = -1;
    std::optional<ExitStatus> status_;
    std::string log_path_;
    std::string command_line_;
};

// Polls `path` until it holds a port number (or `proc` dies, or `timeout` passes).
// Returns 0 on failure.
unsigned short wait_port_file(const std::string& path, Process& proc, Ms timeout);

std::string read_file(const std::string& path);

// Runs `exe args...` to completion (killed after `timeout`), capturing stdout and stderr apart.
struct RunResult {
    ExitStatus status;  // status.exited is false when it had to be killed
    std::string out, err;
    std::string spawn_error;
};
RunResult run_to_exit(const std::string& exe, const std::vector<std::string>& args, Ms timeout);

}  // namespace pdr::test
