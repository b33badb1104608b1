#include "bench/router/process.hpp"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>
#include <chrono>
#include <csignal>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

namespace pdr::bench {
namespace {

std::string read_file(const std::string& path) {
    std::ifstream in(path);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

}  // namespace

Child::Child(std::vector<std::string> argv, const std::string& log_path) {
    static int serial = 0;
    port_file_ =
        "/tmp/pdr-bench-" + std::to_string(getpid()) + "-" + std::to_string(++serial) + ".port";
    ::unlink(port_file_.c_str());
    argv.insert(argv.end(), {"--port", "0", "--port-file", port_file_});
    std::vector<char*> args;
    for (auto& a : argv) {
        args.push_back(a.data());
    }
    args.push_back(nullptr);
    pid_ = ::fork();
    if (pid_ < 0) {
        throw std::runtime_error("fork failed");
    }
    if (pid_ == 0) {
        int fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0) {
            ::dup2(fd, 2);
            ::dup2(fd, 1);
        }
        ::execv(args[0], args.data());
        ::_exit(127);
    }
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(15);
    while (std::chrono::steady_clock::now() < deadline) {
        std::string text = read_file(port_file_);
        if (!text.empty()) {
            port_ = static_cast<unsigned short>(std::stoi(text));
            return;
        }
        int status = 0;
        if (::waitpid(pid_, &status, WNOHANG) == pid_) {
            pid_ = -1;
            throw std::runtime_error(argv[0] + " exited at start-up; see " + log_path);
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    stop();
    throw std::runtime_error(argv[0] + " did not report its port in 15 s; see " + log_path);
}

Child::~Child() {
    stop();
}

double Child::cpu_seconds() const {
    // /proc/<pid>/stat: fields 14 and 15 are utime and stime in clock ticks; the command name
    // (field 2) may contain spaces, so parse after the closing parenthesis.
    std::string stat = read_file("/proc/" + std::to_string(pid_) + "/stat");
    auto close = stat.rfind(')');
    if (close == std::string::npos) {
        return 0;
    }
    std::istringstream in(stat.substr(close + 2));
    std::string field;
    double utime = 0;
    double stime = 0;
    for (int i = 3; i <= 15 && (in >> field); ++i) {
        if (i == 14) {
            utime = std::stod(field);
        } else if (i == 15) {
            stime = std::stod(field);
        }
    }
    return (utime + stime) / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

double Child::peak_rss_mib() const {
    std::istringstream in(read_file("/proc/" + std::to_string(pid_) + "/status"));
    std::string line;
    while (std::getline(in, line)) {
        if (line.rfind("VmHWM:", 0) == 0) {
            return std::stod(line.substr(6)) / 1024.0;
        }
    }
    return 0;
}

void Child::stop() {
    if (pid_ <= 0) {
        return;
    }
    ::kill(pid_, SIGTERM);
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    int status = 0;
    while (::waitpid(pid_, &status, WNOHANG) == 0) {
        if (std::chrono::steady_clock::now() > deadline) {
            ::kill(pid_, SIGKILL);
            ::waitpid(pid_, &status, 0);
            break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    pid_ = -1;
    ::unlink(port_file_.c_str());
}

}  // namespace pdr::bench
