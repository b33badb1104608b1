#include "tests/mocks/fake_http_server.hpp"

#include "net/common/loopback_port.hpp"

#include <algorithm>
#include <list>

namespace pdr::test {

struct FakeHttpServer::State {
    explicit State(net::any_io_executor ex) : executor(ex), acceptor(ex) {}
    net::any_io_executor executor;
    Acceptor acceptor;
    Handler handler;
    std::vector<RecordedRequest> requests;
    std::list<std::weak_ptr<Socket>> sockets;
    bool stopped = false;
    unsigned short port = 0;
};

namespace {

awaitable<void> serve(std::shared_ptr<FakeHttpServer::State> st, std::shared_ptr<Socket> sock) {
    beast::flat_buffer buf;
    for (;;) {
        http::request<http::string_body> req;
        auto [ec, n] = co_await http::async_read(*sock, buf, req, use_tuple);
        if (ec || st->stopped) {
            break;
        }
        RecordedRequest rec{req.method(), std::string(req.target()), req.body(),
                            std::string(req[http::field::authorization]), Clock::now()};
        st->requests.push_back(std::move(rec));
        FakeReply reply = st->handler ? st->handler(req) : FakeReply{404, "{}"};
        // Delay in short slices so stop() ends the wait promptly.
        const auto answer_at = Clock::now() + reply.delay;
        while (!st->stopped && Clock::now() < answer_at) {
            Timer t(st->executor);
            t.expires_after(std::min<Duration>(
                Duration{10}, std::chrono::duration_cast<Duration>(answer_at - Clock::now())));
            co_await t.async_wait();
        }
        if (st->stopped) {
            break;
        }
        http::response<http::string_body> res{static_cast<http::status>(reply.status),
                                              req.version()};
        res.set(http::field::content_type, reply.content_type);
        res.keep_alive(req.keep_alive());
        res.body() = std::move(reply.body);
        res.prepare_payload();
        auto [wec, wn] = co_await http::async_write(*sock, res, use_tuple);
        if (wec || !res.keep_alive()) {
            break;
        }
    }
    error_code ignored;
    sock->shutdown(tcp::socket::shutdown_both, ignored);
    sock->close(ignored);
}

awaitable<void> accept_loop(std::shared_ptr<FakeHttpServer::State> st) {
    while (!st->stopped) {
        auto [ec, raw] = co_await st->acceptor.async_accept(use_tuple);
        if (ec || st->stopped) {
            break;
        }
        auto sock = std::make_shared<Socket>(std::move(raw));
        st->sockets.remove_if([](const std::weak_ptr<Socket>& w) { return w.expired(); });
        st->sockets.push_back(sock);
        net::co_spawn(st->executor, serve(st, sock), net::detached);
    }
}

}  // namespace

FakeHttpServer::FakeHttpServer(net::any_io_executor ex, Handler handler)
    : state_(std::make_shared<State>(ex)) {
    state_->handler = std::move(handler);
}

FakeHttpServer::~FakeHttpServer() {
    stop();
}

unsigned short FakeHttpServer::start() {
    return start("127.0.0.1", 0);
}

unsigned short FakeHttpServer::start(const std::string& address, unsigned short port) {
    tcp::endpoint ep(net::ip::make_address(address), port);
    state_->acceptor.open(ep.protocol());
    state_->acceptor.set_option(net::socket_base::reuse_address(true));
    state_->acceptor.bind(ep);
    state_->acceptor.listen();
    state_->port = state_->acceptor.local_endpoint().port();
    net::co_spawn(state_->executor, accept_loop(state_), net::detached);
    return state_->port;
}

void FakeHttpServer::stop() {
    if (state_->stopped) {
        return;
    }
    state_->stopped = true;
    error_code ignored;
    state_->acceptor.close(ignored);
    for (auto& w : state_->sockets) {
        if (auto s = w.lock()) {
            s->close(ignored);
        }
    }
}

unsigned short FakeHttpServer::port() const {
    return state_->port;
}

const std::vector<RecordedRequest>& FakeHttpServer::requests() const {
    return state_->requests;
}

std::size_t FakeHttpServer::count(std::string_view target) const {
    std::size_t n = 0;
    for (const auto& r : state_->requests) {
        if (r.target == target) {
            ++n;
        }
    }
    return n;
}

void FakeHttpServer::set_handler(Handler handler) {
    state_->handler = std::move(handler);
}

unsigned short unused_port() {
    return pick_loopback_port();
}

}  // namespace pdr::test
