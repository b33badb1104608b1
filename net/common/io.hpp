#pragma once
// I/O aliases shared by every router library and pdsim. Data-path operations use the
// `as_tuple(use_awaitable)` token so each co_await yields `[ec, ...]` (errors as values).
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <chrono>

namespace pdr {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;
using error_code = boost::system::error_code;
using Clock = std::chrono::steady_clock;
using Duration = std::chrono::milliseconds;

template <class T = void>
using awaitable = net::awaitable<T>;

// `co_await op(..., use_tuple)` → std::tuple<error_code, ...>
inline constexpr auto use_tuple = net::as_tuple(net::use_awaitable);

using TupleToken = net::as_tuple_t<net::use_awaitable_t<>>;
using Timer = TupleToken::as_default_on_t<net::steady_timer>;
using Acceptor = TupleToken::as_default_on_t<tcp::acceptor>;
using Resolver = TupleToken::as_default_on_t<tcp::resolver>;
using Socket = TupleToken::as_default_on_t<tcp::socket>;

}  // namespace pdr
