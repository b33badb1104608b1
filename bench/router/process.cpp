#include "bench/router/process.hpp"

#include "net/common/io.hpp"
#include "net/common/loopback_port.hpp"

#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <fstream>
#include <functional>
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

void Child::spawn(std::vector<std::string> argv, const std::string& log_path) {
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
}

Child::Child(std::vector<std::string> argv, const std::string& log_path) {
    static int serial = 0;
    port_file_ =
        "/tmp/pdr-bench-" + std::to_string(getpid()) + "-" + std::to_string(++serial) + ".port";
    ::unlink(port_file_.c_str());
    argv.insert(argv.end(), {"--port", "0", "--port-file", port_file_});
    spawn(argv, log_path);
    wait_ready(argv[0], log_path, "did not report its port in 15 s", [this] {
        std::string text = read_file(port_file_);
        if (text.empty()) {
            return false;
        }
        port_ = static_cast<unsigned short>(std::stoi(text));
        return true;
    });
}

Child::Child(std::vector<std::string> argv, const std::string& log_path, unsigned short port)
    : port_(port) {
    spawn(argv, log_path);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    wait_ready(
        argv[0], log_path, "did not listen on port " + std::to_string(port) + " in 15 s", [&addr] {
            int fd = ::socket(AF_INET, SOCK_STREAM, 0);
            bool up =
                fd >= 0 && ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
            if (fd >= 0) {
                ::close(fd);
            }
            return up;
        });
}

void Child::wait_ready(const std::string& program, const std::string& log_path,
                       const std::string& timeout_message, const std::function<bool()>& ready) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(15);
    while (std::chrono::steady_clock::now() < deadline) {
        if (ready()) {
            return;
        }
        int status = 0;
        if (::waitpid(pid_, &status, WNOHANG) == pid_) {
            pid_ = -1;
            throw std::runtime_error(program + " exited at start-up; see " + log_path);
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    stop();
    throw std::runtime_error(program + " " + timeout_message + "; see " + log_path);
}

Child::~Child() {
    stop();
}

double Child::cpu_seconds() const {
    // Sum over the process's threads of /proc/<pid>/task/<tid>/schedstat's first field: time
    // on a CPU in nanoseconds (user and system), far finer than /proc/<pid>/stat's 10 ms ticks.
    const std::string task_dir = "/proc/" + std::to_string(pid_) + "/task";
    double total_ns = 0;
    if (DIR* dir = ::opendir(task_dir.c_str())) {
        while (dirent* e = ::readdir(dir)) {
            if (e->d_name[0] == '.') {
                continue;
            }
            std::istringstream in(read_file(task_dir + "/" + e->d_name + "/schedstat"));
            double ns = 0;
            if (in >> ns) {
                total_ns += ns;
            }
        }
        ::closedir(dir);
    }
    return total_ns / 1e9;
}

double Child::rss_mib() const {
    std::istringstream in(read_file("/proc/" + std::to_string(pid_) + "/status"));
    std::string line;
    while (std::getline(in, line)) {
        if (line.rfind("VmRSS:", 0) == 0) {
            return std::stod(line.substr(6)) / 1024.0;
        }
    }
    return 0;
}

std::size_t Child::open_fds() const {
    std::size_t n = 0;
    if (DIR* dir = ::opendir(("/proc/" + std::to_string(pid_) + "/fd").c_str())) {
        while (dirent* e = ::readdir(dir)) {
            n += e->d_name[0] != '.';
        }
        ::closedir(dir);
    }
    return n;
}

bool Child::running() const {
    int status = 0;
    return pid_ > 0 && ::waitpid(pid_, &status, WNOHANG) == 0;
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

unsigned short free_port() {
    return pick_loopback_port();
}

HttpAnswer http_call(unsigned short port, const std::string& method, const std::string& target,
                     const std::string& body) {
    net::io_context io;
    beast::tcp_stream stream(io);
    http::request<http::string_body> req{http::string_to_verb(method), target, 11};
    req.set(http::field::host, "127.0.0.1");
    if (!body.empty()) {
        req.set(http::field::content_type, "application/json");
        req.body() = body;
    }
    req.prepare_payload();
    beast::flat_buffer buf;
    http::response<http::string_body> res;
    HttpAnswer out;
    stream.expires_after(std::chrono::seconds(5));
    stream.async_connect({net::ip::make_address("127.0.0.1"), port}, [&](error_code ec) {
        if (ec) {
            return;
        }
        http::async_write(stream, req, [&](error_code wrote, std::size_t) {
            if (wrote) {
                return;
            }
            http::async_read(stream, buf, res, [&](error_code read, std::size_t) {
                if (!read) {
                    out.status = static_cast<int>(res.result_int());
                    out.body = std::move(res.body());
                }
            });
        });
    });
    io.run();
    return out;
}

std::uint64_t json_number(const std::string& body, const std::string& field) {
    const std::string key = "\"" + field + "\":";
    const auto at = body.find(key);
    if (at == std::string::npos) {
        return 0;
    }
    return std::strtoull(body.c_str() + at + key.size(), nullptr, 10);
}

}  // namespace pdr::bench
