#include "sim/kv_link.hpp"

namespace pdr::sim {

KvLink::KvLink(Socket socket, Duration timeout)
    : socket_(std::move(socket)), timeout_(timeout), deadline_(socket_.get_executor(), [this] {
          error_code ignored;
          socket_.close(ignored);
      }) {}

awaitable<std::string> KvLink::connect(KvLink& link, const std::string& host, unsigned short port) {
    Resolver resolver(link.socket_.get_executor());
    link.deadline_.expires_after(link.timeout_);
    auto [rec, results] = co_await resolver.async_resolve(host, std::to_string(port));
    if (rec) {
        link.settle();
        co_return "cannot resolve " + host + ": " + rec.message();
    }
    auto [ec, ep] = co_await net::async_connect(link.socket_, results);
    link.settle();
    if (ec) {
        co_return "cannot connect to " + host + ":" + std::to_string(port) + ": " +
            link.describe(ec);
    }
    link.socket_.set_option(tcp::no_delay(true), ec);
    co_return std::string();
}

awaitable<error_code> KvLink::read(std::span<unsigned char> out) {
    deadline_.expires_after(timeout_);
    auto [ec, n] = co_await net::async_read(socket_, net::buffer(out.data(), out.size()));
    settle();
    co_return ec;
}

awaitable<error_code> KvLink::write(std::span<const unsigned char> in) {
    deadline_.expires_after(timeout_);
    auto [ec, n] = co_await net::async_write(socket_, net::buffer(in.data(), in.size()));
    settle();
    co_return ec;
}

void KvLink::close() noexcept {
    deadline_.cancel();
    error_code ignored;
    socket_.shutdown(tcp::socket::shutdown_both, ignored);
    socket_.close(ignored);
}

void KvLink::settle() noexcept {
    timed_out_ = deadline_.expired();
    deadline_.expires_never();
}

std::string KvLink::describe(const error_code& ec) const {
    return timed_out_ ? std::string("timed out") : ec.message();
}

}  // namespace pdr::sim
