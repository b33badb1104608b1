#include "tests/support/http.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace pdr::test {

namespace {

std::string lower(std::string_view s) {
    std::string out(s);
    std::transform(out.begin(), out.end(), out.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    return out;
}

std::string trim(std::string_view s) {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) {
        s.remove_prefix(1);
    }
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) {
        s.remove_suffix(1);
    }
    return std::string(s);
}

}  // namespace

std::string HttpResponse::header(std::string_view name) const {
    std::string n = lower(name);
    for (const auto& [k, v] : headers) {
        if (k == n) {
            return v;
        }
    }
    return {};
}

bool HttpResponse::has_header(std::string_view name) const {
    std::string n = lower(name);
    return std::any_of(headers.begin(), headers.end(), [&](const auto& h) { return h.first == n; });
}

nlohmann::json HttpResponse::json() const {
    return nlohmann::json::parse(body, nullptr, false);
}

std::string HttpResponse::describe() const {
    std::string s = "status=" + std::to_string(status);
    if (!error.empty()) {
        s += " error='" + error + "'";
    }
    s += " body='" + body.substr(0, 600) + (body.size() > 600 ? "...'" : "'");
    return s;
}

// ---- ResponseParser ---------------------------------------------------------------------------

bool ResponseParser::feed(std::string_view data) {
    buf_.append(data);
    if (!head_done_ && !parse_head()) {
        return false;
    }
    if (head_done_ && !response_.complete) {
        return parse_body();
    }
    return true;
}

void ResponseParser::eof() {
    if (response_.complete) {
        return;
    }
    if (head_done_ && content_length_ < 0 && !response_.chunked) {
        response_.complete = true;  // close-delimited body
        return;
    }
    if (response_.error.empty()) {
        response_.error = head_done_ ? "connection closed before the body was complete"
                                     : "connection closed before a response head";
    }
}

bool ResponseParser::parse_head() {
    auto end = buf_.find("\r\n\r\n");
    if (end == std::string::npos) {
        return true;  // need more
    }
    std::string head = buf_.substr(0, end);
    buf_.erase(0, end + 4);
    std::size_t pos = head.find("\r\n");
    std::string status_line = head.substr(0, pos);
    if (status_line.rfind("HTTP/1.", 0) != 0 || status_line.size() < 12) {
        response_.error = "bad status line: " + status_line;
        return false;
    }
    response_.status = std::atoi(status_line.c_str() + 9);
    while (pos != std::string::npos) {
        std::size_t next = head.find("\r\n", pos + 2);
        std::string line =
            head.substr(pos + 2, next == std::string::npos ? std::string::npos : next - pos - 2);
        pos = next;
        auto colon = line.find(':');
        if (colon == std::string::npos) {
            continue;
        }
        response_.headers.emplace_back(lower(trim(line.substr(0, colon))),
                                       trim(line.substr(colon + 1)));
    }
    head_done_ = true;
    if (lower(response_.header("transfer-encoding")).find("chunked") != std::string::npos) {
        response_.chunked = true;
    } else if (response_.has_header("content-length")) {
        content_length_ = std::atoll(response_.header("content-length").c_str());
    }
    if (response_.status == 204 || response_.status == 304 || response_.status < 200) {
        content_length_ = 0;
    }
    return true;
}

bool ResponseParser::parse_body() {
    if (!response_.chunked) {
        if (content_length_ < 0) {
            response_.body += buf_;
            buf_.clear();
            return true;
        }
        auto want = static_cast<std::size_t>(content_length_) - response_.body.size();
        auto take = std::min(want, buf_.size());
        response_.body.append(buf_, 0, take);
        buf_.erase(0, take);
        if (response_.body.size() == static_cast<std::size_t>(content_length_)) {
            response_.complete = true;
        }
        return true;
    }
    while (true) {
        if (in_trailer_) {
            auto eol = buf_.find("\r\n");
            if (eol == std::string::npos) {
                return true;
            }
            bool empty = eol == 0;
            buf_.erase(0, eol + 2);
            if (empty) {
                response_.complete = true;
                return true;
            }
            continue;
        }
        if (chunk_left_ == -1) {
            auto eol = buf_.find("\r\n");
            if (eol == std::string::npos) {
                return true;
            }
            std::string line = buf_.substr(0, eol);
            buf_.erase(0, eol + 2);
            char* endp = nullptr;
            long long n = std::strtoll(line.c_str(), &endp, 16);
            if (endp == line.c_str() || n < 0) {
                response_.error = "bad chunk size line: '" + line + "'";
                return false;
            }
            if (n == 0) {
                in_trailer_ = true;
                continue;
            }
            chunk_left_ = n;
        } else if (chunk_left_ == -2) {
            if (buf_.size() < 2) {
                return true;
            }
            if (buf_.compare(0, 2, "\r\n") != 0) {
                response_.error = "missing CRLF after chunk data";
                return false;
            }
            buf_.erase(0, 2);
            chunk_left_ = -1;
        } else {
            if (buf_.empty()) {
                return true;
            }
            auto take = std::min(static_cast<std::size_t>(chunk_left_), buf_.size());
            response_.body.append(buf_, 0, take);
            buf_.erase(0, take);
            chunk_left_ -= static_cast<long long>(take);
            if (chunk_left_ == 0) {
                chunk_left_ = -2;
            }
        }
    }
}

// ---- Connection -------------------------------------------------------------------------------

Connection::~Connection() {
    close();
}

Connection& Connection::operator=(Connection&& o) noexcept {
    if (this != &o) {
        close();
        fd_ = o.fd_;
        o.fd_ = -1;
    }
    return *this;
}

bool Connection::connect(unsigned short port, std::string& error) {
    close();
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd_ < 0) {
        error = std::string("socket: ") + std::strerror(errno);
        return false;
    }
    int one = 1;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
        error = "connect 127.0.0.1:" + std::to_string(port) + ": " + std::strerror(errno);
        close();
        return false;
    }
    return true;
}

bool Connection::write_all(std::string_view data, std::string& error) {
    while (!data.empty()) {
        ssize_t n = ::send(fd_, data.data(), data.size(), MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR) {
                continue;
            }
            error = std::string("send: ") + std::strerror(errno);
            return false;
        }
        data.remove_prefix(static_cast<std::size_t>(n));
    }
    return true;
}

std::string Connection::read_some(Clock::time_point deadline, bool& eof, bool& timed_out,
                                  std::string& error) {
    eof = false;
    timed_out = false;
    while (true) {
        auto left = std::chrono::duration_cast<Ms>(deadline - Clock::now()).count();
        if (left <= 0) {
            timed_out = true;
            return {};
        }
        pollfd p{fd_, POLLIN, 0};
        int r = ::poll(&p, 1, static_cast<int>(std::min<long long>(left, 1000)));
        if (r < 0 && errno != EINTR) {
            error = std::string("poll: ") + std::strerror(errno);
            eof = true;
            return {};
        }
        if (r <= 0) {
            continue;
        }
        char buf[16384];
        ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
        if (n > 0) {
            return std::string(buf, static_cast<std::size_t>(n));
        }
        if (n == 0) {
            eof = true;
            return {};
        }
        if (errno == EINTR || errno == EAGAIN) {
            continue;
        }
        if (errno == ECONNRESET) {
            eof = true;
            error = "connection reset by peer";
            return {};
        }
        error = std::string("recv: ") + std::strerror(errno);
        eof = true;
        return {};
    }
}

void Connection::close(bool abort) {
    if (fd_ < 0) {
        return;
    }
    if (abort) {
        linger l{1, 0};
        ::setsockopt(fd_, SOL_SOCKET, SO_LINGER, &l, sizeof l);
    }
    ::close(fd_);
    fd_ = -1;
}

// ---- requests ---------------------------------------------------------------------------------

std::string serialize(const HttpRequest& req) {
    auto has = [&](std::string_view name) {
        std::string n = lower(name);
        return std::any_of(req.headers.begin(), req.headers.end(),
                           [&](const auto& h) { return lower(h.first) == n; });
    };
    std::string out = req.method + " " + req.target + " HTTP/1.1\r\n";
    if (!has("host")) {
        out += "Host: 127.0.0.1\r\n";
    }
    for (const auto& [k, v] : req.headers) {
        out += k + ": " + v + "\r\n";
    }
    if (!has("content-length") && !has("transfer-encoding") &&
        (!req.body.empty() || req.method == "POST")) {
        out += "Content-Length: " + std::to_string(req.body.size()) + "\r\n";
    }
    if (!has("connection")) {
        out += "Connection: close\r\n";
    }
    out += "\r\n";
    out += req.body;
    return out;
}

TimedResponse http_request_timed(unsigned short port, const HttpRequest& req, Ms timeout) {
    TimedResponse t;
    Connection c;
    std::string error;
    t.sent = Clock::now();
    if (!c.connect(port, error) || !c.write_all(serialize(req), error)) {
        t.response.error = error;
        t.end_at = Clock::now();
        return t;
    }
    ResponseParser parser;
    auto deadline = Clock::now() + timeout;
    while (!parser.done()) {
        bool eof = false, timed_out = false;
        std::string data = c.read_some(deadline, eof, timed_out, error);
        auto now = Clock::now();
        if (timed_out) {
            parser.response().error = "timed out after " + std::to_string(timeout.count()) + " ms";
            break;
        }
        if (eof) {
            t.closed_by_peer = true;
            parser.eof();
            if (!error.empty() && parser.response().error.empty() && !parser.done()) {
                parser.response().error = error;
            }
            break;
        }
        bool had_head = parser.head_done();
        if (!parser.feed(data)) {
            break;
        }
        if (!had_head && parser.head_done()) {
            t.head_at = now;
        }
        if (!t.saw_first_event && parser.response().body.find("\n\n") != std::string::npos &&
            parser.response().body.rfind("data:", 0) == 0) {
            t.saw_first_event = true;
            t.first_event_at = now;
        }
    }
    t.end_at = Clock::now();
    t.response = std::move(parser.response());
    return t;
}

HttpResponse http_request(unsigned short port, const HttpRequest& req, Ms timeout) {
    return http_request_timed(port, req, timeout).response;
}

HttpResponse http_raw(unsigned short port, const std::string& raw, Ms timeout) {
    Connection c;
    std::string error;
    HttpResponse r;
    if (!c.connect(port, error) || !c.write_all(raw, error)) {
        r.error = error;
        return r;
    }
    ResponseParser parser;
    auto deadline = Clock::now() + timeout;
    while (!parser.done()) {
        bool eof = false, timed_out = false;
        std::string data = c.read_some(deadline, eof, timed_out, error);
        if (timed_out) {
            parser.response().error = "timed out";
            break;
        }
        if (eof) {
            parser.eof();
            break;
        }
        if (!parser.feed(data)) {
            break;
        }
    }
    return std::move(parser.response());
}

HttpResponse http_exchange(Connection& c, const HttpRequest& req, Ms timeout) {
    HttpResponse r;
    std::string error;
    if (!c.is_open() || !c.write_all(serialize(req), error)) {
        r.error = error.empty() ? "connection not open" : error;
        return r;
    }
    ResponseParser parser;
    auto deadline = Clock::now() + timeout;
    while (!parser.done()) {
        bool eof = false, timed_out = false;
        std::string data = c.read_some(deadline, eof, timed_out, error);
        if (timed_out) {
            parser.response().error = "timed out";
            break;
        }
        if (eof) {
            parser.eof();
            c.close();
            break;
        }
        if (!parser.feed(data)) {
            break;
        }
    }
    return std::move(parser.response());
}

HttpResponse http_get(unsigned short port, const std::string& target, const Headers& headers,
                      Ms timeout) {
    return http_request(port, HttpRequest{"GET", target, headers, {}}, timeout);
}

HttpResponse http_post(unsigned short port, const std::string& target, const std::string& body,
                       const Headers& headers, Ms timeout, const std::string& content_type) {
    HttpRequest req{"POST", target, headers, body};
    if (!content_type.empty()) {
        req.headers.emplace_back("Content-Type", content_type);
    }
    return http_request(port, req, timeout);
}

HttpResponse http_post_json(unsigned short port, const std::string& target,
                            const nlohmann::json& body, const Headers& headers, Ms timeout) {
    return http_post(port, target, body.dump(), headers, timeout);
}

double ms_between(Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double, std::milli>(b - a).count();
}

}  // namespace pdr::test
