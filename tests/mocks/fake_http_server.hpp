#pragma once
// A tiny scripted HTTP/1.1 server for unit tests (127.0.0.1, port 0): keep-alive, one
// coroutine per connection, every request recorded with its arrival time. The handler decides
// each answer (status, body, optional delay before answering). stop() closes the listener and
// every open connection; coroutines still running hold the shared state, so the server object
// may be destroyed before the io_context.
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "net/common/io.hpp"

namespace pdr::test {

struct FakeReply {
    unsigned status = 200;
    std::string body;
    Duration delay{0};  // wait this long before answering
    std::string content_type = "application/json";
};

struct RecordedRequest {
    http::verb method;
    std::string target;
    std::string body;
    std::string authorization;
    Clock::time_point at;
};

class FakeHttpServer {
public:
    using Request = http::request<http::string_body>;
    using Handler = std::function<FakeReply(const Request&)>;

    FakeHttpServer(net::any_io_executor ex, Handler handler);
    ~FakeHttpServer();
    FakeHttpServer(const FakeHttpServer&) = delete;
    FakeHttpServer& operator=(const FakeHttpServer&) = delete;

    // Binds 127.0.0.1:0 and starts accepting; returns the port.
    unsigned short start();
    // Binds `address`:`port` (a loopback address: 127.0.0.2 gives a second host on one port).
    unsigned short start(const std::string& address, unsigned short port);
    void stop();
    unsigned short port() const;

    // Every request received so far, in arrival order.
    const std::vector<RecordedRequest>& requests() const;
    std::size_t count(std::string_view target) const;  // requests whose target equals `target`
    void set_handler(Handler handler);

    struct State;

private:
    std::shared_ptr<State> state_;
};

// A loopback port with nothing listening on it (bound, then closed), for refused connects.
unsigned short unused_port();

}  // namespace pdr::test
