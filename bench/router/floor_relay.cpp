// pdr_floor_relay: the least a P/D router can do for one request on pdrouter's own platform (Asio
// coroutines on one io_context(1), its edge-triggered epoll reactor, the same completion token),
// so that bench/router can measure §5's floor in the same run as the nginx hop and pdrouter:
// read the client's request, send P a prefill request, find kv_transfer_params in P's answer,
// send D the request with them, pass D's answer on as it comes (head and chunks verbatim).
//
// Nothing else: no validation (the request and the answers are trusted to be what pdsim and
// pdrouter_bench send), no header handling beyond Content-Length, no deadlines, retries, leases,
// metrics or logs; an error closes the client connection. Not a product; never put it in front
// of anything. Accepts pdrouter's command line as pdrouter_bench gives it (--prefill H:P
// --decode H:P --port N --port-file PATH; other flags are ignored), so a directory whose
// router/pdrouter is this binary runs the bench's rows through it:
//
//   mkdir -p /tmp/floor/router /tmp/floor/sim
//   ln -s $PWD/build/release/bench/router/pdr_floor_relay /tmp/floor/router/pdrouter
//   ln -s $PWD/build/release/sim/pdsim /tmp/floor/sim/pdsim
//   build/release/bench/router/pdrouter_bench --bin-dir /tmp/floor --delays 10 ...
#include "net/common/io.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace {

using namespace pdr;

constexpr std::size_t kReadSize = 16 * 1024;

struct Upstream {
    tcp::endpoint at;
    std::vector<std::unique_ptr<tcp::socket>> idle;  // kept-alive connections
};

struct Relay {
    Upstream prefill;
    Upstream decode;
    unsigned long next_id = 0;
};

// A client connection's read space: its reads (client, P, D) happen one at a time.
using Scratch = std::vector<char>;

// Appends what one read brings (read into `scratch`: growing `in` first would zero-fill the
// space each time). False on EOF or an error.
awaitable<bool> read_more(tcp::socket& s, std::string& in, Scratch& scratch) {
    auto [ec, n] = co_await s.async_read_some(net::buffer(scratch), use_tuple);
    in.append(scratch.data(), n);
    co_return !ec && n > 0;
}

// The Content-Length of a head (lower- or capitalized name, as pdsim and the bench write it).
std::size_t content_length(std::string_view head) {
    for (std::string_view name : {"content-length:", "Content-Length:"}) {
        if (auto at = head.find(name); at != std::string_view::npos) {
            return std::strtoul(head.data() + at + name.size(), nullptr, 10);
        }
    }
    return 0;
}

// Reads one message with a Content-Length body from the front of `in` (reading more as needed):
// its size, or 0 on failure. A chunked message: its head's size, `chunked` set.
awaitable<std::size_t> read_message(tcp::socket& s, std::string& in, bool& chunked,
                                    Scratch& scratch) {
    std::size_t head_end;
    while ((head_end = in.find("\r\n\r\n")) == std::string::npos) {
        if (!co_await read_more(s, in, scratch)) {
            co_return 0;
        }
    }
    const std::string_view head(in.data(), head_end);
    chunked = head.find("chunked") != std::string_view::npos;
    if (chunked) {
        co_return head_end + 4;
    }
    const std::size_t size = head_end + 4 + content_length(head);
    while (in.size() < size) {
        if (!co_await read_more(s, in, scratch)) {
            co_return 0;
        }
    }
    co_return size;
}

// The value of "kv_transfer_params" in P's answer (an object, matched by its braces).
std::string_view kv_params(std::string_view answer) {
    constexpr std::string_view key = "\"kv_transfer_params\":";
    auto at = answer.find(key);
    if (at == std::string_view::npos) {
        return {};
    }
    const std::size_t start = at + key.size();
    int depth = 0;
    bool in_string = false;
    for (std::size_t i = start; i < answer.size(); ++i) {
        const char c = answer[i];
        if (in_string) {
            if (c == '\\') {
                ++i;
            } else if (c == '"') {
                in_string = false;
            }
        } else if (c == '"') {
            in_string = true;
        } else if (c == '{') {
            ++depth;
        } else if (c == '}' && --depth == 0) {
            return answer.substr(start, i + 1 - start);
        }
    }
    return {};
}

// Writes all of `data`: a non-blocking send first (pdrouter does the same), so that a write
// the socket takes at once completes without a trip through the scheduler; the rest, if any,
// through Asio.
awaitable<error_code> send_all(tcp::socket& s, std::string_view data) {
    error_code ec;
    if (!s.non_blocking()) {
        s.non_blocking(true, ec);
    }
    std::size_t sent = ec ? 0 : s.write_some(net::buffer(data), ec);
    if (ec == net::error::would_block || ec == net::error::try_again) {
        ec = {};
        sent = 0;
    }
    if (ec || sent == data.size()) {
        co_return ec;
    }
    auto [wec, n] = co_await net::async_write(s, net::buffer(data.substr(sent)), use_tuple);
    co_return wec;
}

awaitable<std::unique_ptr<tcp::socket>> connect(const Upstream& u) {
    auto s = std::make_unique<tcp::socket>(co_await net::this_coro::executor);
    auto [ec] = co_await s->async_connect(u.at, use_tuple);
    if (ec) {
        co_return nullptr;
    }
    s->set_option(tcp::no_delay(true));
    co_return s;
}

// Sends `out` to the upstream and reads its answer's head (and a Content-Length body) into
// `answer`: its size, 0 on failure. A kept-alive connection the engine closed while idle fails
// before any answer: the request then goes once more on a new connection.
awaitable<std::size_t> exchange(Upstream& u, const std::string& out, std::string& answer,
                                bool& chunked, std::unique_ptr<tcp::socket>& conn,
                                Scratch& scratch) {
    for (int attempt = 0; attempt < 2; ++attempt) {
        const bool reused = attempt == 0 && !u.idle.empty();
        if (reused) {
            conn = std::move(u.idle.back());
            u.idle.pop_back();
        } else {
            conn = co_await connect(u);
        }
        if (!conn) {
            co_return 0;
        }
        answer.clear();
        const error_code ec = co_await send_all(*conn, out);
        const std::size_t size = ec ? 0 : co_await read_message(*conn, answer, chunked, scratch);
        if (size > 0 || !reused || !answer.empty()) {
            co_return size;
        }
    }
    co_return 0;
}

std::string post(std::string_view id, std::string_view body_start, std::string_view tail) {
    std::string out =
        "POST /v1/completions HTTP/1.1\r\nHost: engine\r\n"
        "Content-Type: application/json\r\nX-Request-Id: ";
    out.append(id).append("\r\nContent-Length: ");
    out.append(std::to_string(body_start.size() + tail.size())).append("\r\n\r\n");
    out.append(body_start).append(tail);
    return out;
}

// One request: false when the client connection must close.
awaitable<bool> one_request(Relay& relay, tcp::socket& client, std::string& in, Scratch& scratch) {
    bool chunked = false;
    const std::size_t size = co_await read_message(client, in, chunked, scratch);
    if (size == 0) {
        co_return false;
    }
    const std::string_view request(in.data(), size);
    const std::string_view body = request.substr(request.find("\r\n\r\n") + 4);
    const std::string_view open = body.substr(0, body.rfind('}'));  // the body without its '}'
    const std::string id = "floor-" + std::to_string(++relay.next_id);

    // Prefill: the same body, with duplicate keys that pdsim (nlohmann: the last one wins) takes.
    std::string out = post(id, open,
                           ",\"stream\":false,\"max_tokens\":1,"
                           "\"kv_transfer_params\":{\"do_remote_decode\":true}}");
    std::unique_ptr<tcp::socket> p, d;
    std::string answer;
    const std::size_t answer_size =
        co_await exchange(relay.prefill, out, answer, chunked, p, scratch);
    if (answer_size == 0 || chunked) {
        co_return false;
    }
    relay.prefill.idle.push_back(std::move(p));
    const std::string_view params = kv_params(std::string_view(answer).substr(0, answer_size));
    if (params.empty()) {
        co_return false;
    }

    // Decode: the client's body with the handle.
    out = post(id, open, std::string(",\"kv_transfer_params\":").append(params).append("}"));
    in.erase(0, size);  // (`open` pointed into it)
    std::string from_d;
    const std::size_t got = co_await exchange(relay.decode, out, from_d, chunked, d, scratch);
    if (got == 0) {
        co_return false;
    }
    if (!chunked) {
        const error_code ec = co_await send_all(client, std::string_view(from_d).substr(0, got));
        relay.decode.idle.push_back(std::move(d));
        co_return !ec;
    }
    // Chunked: pass on what arrives until the last chunk ("0\r\n\r\n"; pdsim ends its stream
    // with it, not with trailers) ends a read. `tail`: the last bytes passed on, in case a
    // read ends inside it.
    std::string tail;
    for (;;) {
        const error_code ec = co_await send_all(client, from_d);
        if (ec) {
            co_return false;
        }
        tail.append(from_d, from_d.size() - std::min<std::size_t>(from_d.size(), 5));
        tail.erase(0, tail.size() - std::min<std::size_t>(tail.size(), 5));
        if (tail == "0\r\n\r\n") {
            break;
        }
        from_d.clear();
        if (!co_await read_more(*d, from_d, scratch)) {
            co_return false;
        }
    }
    relay.decode.idle.push_back(std::move(d));
    co_return true;
}

awaitable<void> serve(Relay& relay, tcp::socket client) {
    client.set_option(tcp::no_delay(true));
    std::string in;
    Scratch scratch(kReadSize);
    while (co_await one_request(relay, client, in, scratch)) {
    }
}

awaitable<void> accept_loop(Relay& relay, tcp::acceptor& acceptor) {
    for (;;) {
        auto [ec, s] = co_await acceptor.async_accept(use_tuple);
        if (ec) {
            co_return;
        }
        net::co_spawn(acceptor.get_executor(), serve(relay, std::move(s)), net::detached);
    }
}

tcp::endpoint endpoint_of(const std::string& host_port) {
    const auto colon = host_port.rfind(':');
    return {net::ip::make_address(host_port.substr(0, colon)),
            static_cast<unsigned short>(std::stoi(host_port.substr(colon + 1)))};
}

}  // namespace

int main(int argc, char** argv) {
    std::string prefill, decode, port_file;
    unsigned short port = 0;
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string_view flag = argv[i];
        if (flag == "--prefill") {
            prefill = argv[i + 1];
        } else if (flag == "--decode") {
            decode = argv[i + 1];
        } else if (flag == "--port") {
            port = static_cast<unsigned short>(std::stoi(argv[i + 1]));
        } else if (flag == "--port-file") {
            port_file = argv[i + 1];
        }
    }
    if (prefill.empty() || decode.empty()) {
        std::fprintf(stderr,
                     "usage: pdr_floor_relay --prefill H:P --decode H:P [--port N] "
                     "[--port-file PATH]\n");
        return 2;
    }
    net::io_context ioc(1);
    Relay relay{{endpoint_of(prefill), {}}, {endpoint_of(decode), {}}};
    tcp::acceptor acceptor(ioc, {net::ip::make_address("127.0.0.1"), port});
    if (!port_file.empty()) {
        const std::string tmp = port_file + ".tmp";
        std::ofstream(tmp) << acceptor.local_endpoint().port();
        std::rename(tmp.c_str(), port_file.c_str());
    }
    net::co_spawn(ioc, accept_loop(relay, acceptor), net::detached);
    ioc.run();
    return 0;
}
