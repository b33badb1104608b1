#include "tests/support/process.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

extern char** environ;

namespace pdr::test {

std::string build_dir() {
    const char* d = std::getenv("PDR_BUILD_DIR");
    return d ? std::string(d) : std::string();
}

std::string pdrouter_path() {
    return build_dir() + "/router/pdrouter";
}
std::string pdsim_path() {
    return build_dir() + "/sim/pdsim";
}

TempDir::TempDir() {
    const char* base = std::getenv("TMPDIR");
    std::string tmpl = std::string(base && *base ? base : "/tmp") + "/pdr-test-XXXXXX";
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    if (::mkdtemp(buf.data()) == nullptr) {
        throw std::runtime_error("mkdtemp failed: " + std::string(std::strerror(errno)));
    }
    path_ = buf.data();
}

TempDir::~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
}

std::string read_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

std::optional<Process> Process::spawn(const std::string& exe, const std::vector<std::string>& args,
                                      const std::string& log_path, std::string& error,
                                      const std::string& stderr_path) {
    if (::access(exe.c_str(), X_OK) != 0) {
        error = "not an executable: " + exe + " (is PDR_BUILD_DIR set and the target built?)";
        return std::nullopt;
    }
    std::vector<std::string> argv_s;
    argv_s.push_back(exe);
    argv_s.insert(argv_s.end(), args.begin(), args.end());
    std::vector<char*> argv;
    std::string cmd;
    for (auto& a : argv_s) {
        argv.push_back(a.data());
        cmd += (cmd.empty() ? "" : " ") + a;
    }
    argv.push_back(nullptr);

    // Open the files in the parent so the child only dup2s (async-signal-safe after fork).
    const int in = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    const int out = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    const int err = stderr_path.empty() ? -1
                                        : ::open(stderr_path.c_str(),
                                                 O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    auto close_all = [&] {
        for (int fd : {in, out, err}) {
            if (fd >= 0) {
                ::close(fd);
            }
        }
    };
    if (in < 0 || out < 0 || (!stderr_path.empty() && err < 0)) {
        error = "cannot open log file " + log_path + ": " + std::strerror(errno);
        close_all();
        return std::nullopt;
    }
    const pid_t parent = ::getpid();
    const pid_t pid = ::fork();
    if (pid < 0) {
        error = std::string("fork: ") + std::strerror(errno);
        close_all();
        return std::nullopt;
    }
    if (pid == 0) {
        // Child: die with the test process (a crashed or timed-out test leaves no servers).
        ::prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (::getppid() != parent) {
            ::_exit(127);
        }
        ::dup2(in, 0);
        ::dup2(out, 1);
        ::dup2(err >= 0 ? err : out, 2);
        ::execve(exe.c_str(), argv.data(), environ);
        ::_exit(127);
    }
    close_all();
    Process p;
    p.pid_ = pid;
    p.log_path_ = log_path;
    p.command_line_ = cmd;
    return p;
}

Process::Process(Process&& other) noexcept
    : pid_(other.pid_),
      status_(other.status_),
      log_path_(std::move(other.log_path_)),
      command_line_(std::move(other.command_line_)) {
    other.pid_ = -1;
}

Process& Process::operator=(Process&& other) noexcept {
    if (this != &other) {
        stop();
        pid_ = other.pid_;
        status_ = other.status_;
        log_path_ = std::move(other.log_path_);
        command_line_ = std::move(other.command_line_);
        other.pid_ = -1;
    }
    return *this;
}

Process::~Process() {
    stop();
}

namespace {
ExitStatus decode_status(int st) {
    ExitStatus s;
    s.exited = true;
    if (WIFEXITED(st)) {
        s.code = WEXITSTATUS(st);
    } else if (WIFSIGNALED(st)) {
        s.signal = WTERMSIG(st);
    }
    return s;
}
}  // namespace

bool Process::running() {
    if (pid_ <= 0 || status_) {
        return false;
    }
    int st = 0;
    pid_t r = ::waitpid(pid_, &st, WNOHANG);
    if (r == pid_) {
        status_ = decode_status(st);
        return false;
    }
    return r == 0;
}

ExitStatus Process::wait(Ms timeout) {
    if (pid_ <= 0) {
        return ExitStatus{true, -1, 0};
    }
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (true) {
        if (!running()) {
            return status_ ? *status_ : ExitStatus{true, -1, 0};
        }
        if (std::chrono::steady_clock::now() >= deadline) {
            return ExitStatus{};
        }
        std::this_thread::sleep_for(Ms{5});
    }
}

void Process::signal(int sig) {
    if (running()) {
        ::kill(pid_, sig);
    }
}

void Process::kill_now() {
    if (running()) {
        ::kill(pid_, SIGKILL);
        int st = 0;
        if (::waitpid(pid_, &st, 0) == pid_) {
            status_ = decode_status(st);
        }
    }
}

ExitStatus Process::stop(Ms grace) {
    if (pid_ <= 0) {
        return ExitStatus{true, -1, 0};
    }
    if (running()) {
        ::kill(pid_, SIGTERM);
        ExitStatus s = wait(grace);
        if (!s.exited) {
            kill_now();
        }
    }
    return status_ ? *status_ : ExitStatus{true, -1, 0};
}

std::string Process::log() const {
    return read_file(log_path_);
}

unsigned short wait_port_file(const std::string& path, Process& proc, Ms timeout) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
        std::string s = read_file(path);
        if (!s.empty()) {
            char* end = nullptr;
            long v = std::strtol(s.c_str(), &end, 10);
            if (end != s.c_str() && v > 0 && v < 65536) {
                return static_cast<unsigned short>(v);
            }
        }
        if (!proc.running()) {
            return 0;
        }
        std::this_thread::sleep_for(Ms{10});
    }
    return 0;
}

RunResult run_to_exit(const std::string& exe, const std::vector<std::string>& args, Ms timeout) {
    RunResult r;
    TempDir dir;
    auto proc = Process::spawn(exe, args, dir.file("out"), r.spawn_error, dir.file("err"));
    if (!proc) {
        return r;
    }
    r.status = proc->wait(timeout);
    if (!r.status.exited) {
        proc->kill_now();
    }
    r.out = read_file(dir.file("out"));
    r.err = read_file(dir.file("err"));
    return r;
}

}  // namespace pdr::test
