#include "net/upstream/pool.hpp"

#include "config/ascii.hpp"
#include "net/common/fields.hpp"
#include "net/common/request_id.hpp"

#include <sys/socket.h>

#include <cerrno>

namespace pdr::upstream {

namespace {

// A pooled connection is usable if the peer has neither closed it nor sent anything unasked.
bool looks_alive(detail::Conn& c) {
    auto& sock = c.stream.socket();
    if (!sock.is_open() || c.buffer.size() != 0) {
        return false;
    }
    char byte;
    ssize_t n = ::recv(sock.native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
}

// Still worth keeping in the pool at `now`: not idle past the TTL and not closed by the peer.
bool reusable(detail::Conn& c, Clock::time_point now, const PoolLimits& limits) {
    return now - c.idle_since <= limits.idle_ttl && looks_alive(c);
}

void close_conn(detail::Conn& c) {
    error_code ec;
    c.stream.socket().shutdown(tcp::socket::shutdown_both, ec);
    c.stream.close();
}

}  // namespace

namespace detail {

Conn::Conn(const net::any_io_executor& ex)
    : stream(ex), deadline(ex, [this] { close_conn(*this); }) {}

Conn::~Conn() {
    set_idle();
}

void Conn::set_busy(const std::shared_ptr<BusyList>& list) {
    set_idle();
    busy_ = list;
    busy_at_ = list->conns.size();
    list->conns.push_back(this);
    quiet_since = Clock::now();
}

void Conn::set_idle() noexcept {
    quiet_since = Clock::time_point::max();
    if (!busy_) {
        return;
    }
    // Swap with the last one and pop: O(1).
    auto& v = busy_->conns;
    Conn* last = v.back();
    v[busy_at_] = last;
    last->busy_at_ = busy_at_;
    v.pop_back();
    busy_.reset();
}

}  // namespace detail

Client::Impl::~Impl() {
    close_all();
}

detail::ConnPtr Client::Impl::take(const std::string& key) {
    auto it = idle.find(key);
    if (it == idle.end()) {
        return nullptr;
    }
    auto& list = it->second;
    const auto now = Clock::now();
    while (!list.empty()) {
        detail::ConnPtr c = std::move(list.back());
        list.pop_back();
        --idle_count;
        if (reusable(*c, now, limits)) {
            return c;
        }
        close_conn(*c);
    }
    return nullptr;
}

void Client::Impl::give_back(const std::string& key, detail::ConnPtr c) {
    if (limits.max_idle_per_endpoint == 0 || !c->stream.socket().is_open() ||
        c->buffer.size() != 0) {
        close_conn(*c);
        return;
    }
    auto& list = idle[key];
    const auto now = Clock::now();
    // Oldest first: drop expired ones and make room.
    std::size_t expired = 0;
    while (expired < list.size() && now - list[expired]->idle_since > limits.idle_ttl) {
        ++expired;
    }
    if (list.size() - expired >= limits.max_idle_per_endpoint) {
        expired = list.size() - limits.max_idle_per_endpoint + 1;
    }
    for (std::size_t i = 0; i < expired; ++i) {
        close_conn(*list[i]);
    }
    list.erase(list.begin(), list.begin() + static_cast<std::ptrdiff_t>(expired));
    idle_count -= expired;
    c->set_idle();
    c->idle_since = now;
    c->stream.expires_never();
    c->deadline.cancel();
    list.push_back(std::move(c));
    ++idle_count;
}

std::size_t Client::Impl::sweep() {
    const auto now = Clock::now();
    std::size_t closed = 0;
    for (auto it = idle.begin(); it != idle.end();) {
        auto& list = it->second;
        auto keep = list.begin();
        for (auto& c : list) {
            if (reusable(*c, now, limits)) {
                *keep++ = std::move(c);
            } else {
                close_conn(*c);
                ++closed;
            }
        }
        list.erase(keep, list.end());
        it = list.empty() ? idle.erase(it) : std::next(it);
    }
    idle_count -= closed;
    return closed;
}

std::size_t Client::Impl::fail_stalled(const std::string& key, Duration quiet) {
    const auto now = Clock::now();
    std::vector<detail::Conn*> stalled;
    for (detail::Conn* c : busy->conns) {
        if (c->key == key && c->quiet_since != Clock::time_point::max() &&
            now - c->quiet_since >= quiet && c->stream.socket().is_open()) {
            stalled.push_back(c);
        }
    }
    // The deadline closes the socket: the pending operation ends (later, in its own
    // coroutine) as a timeout. Nothing is destroyed here.
    for (detail::Conn* c : stalled) {
        c->deadline.expire_now();
    }
    return stalled.size();
}

void Client::Impl::close_all() {
    for (auto& [key, list] : idle) {
        for (auto& c : list) {
            close_conn(*c);
        }
    }
    idle.clear();
    idle_count = 0;
}

void Client::Impl::close_key(const std::string& key) {
    auto it = idle.find(key);
    if (it == idle.end()) {
        return;
    }
    for (auto& c : it->second) {
        close_conn(*c);
    }
    idle_count -= it->second.size();
    idle.erase(it);
}

namespace {

// A DNS lookup that the caller can stop waiting for: getaddrinfo runs on Asio's resolver thread
// and cannot be interrupted, so the lookup runs detached and reports into this shared state;
// the caller waits on `wake` (a timer that the lookup cancels when it is done), which honours
// the connect timeout and the caller's cancellation (a client that goes away) at once.
struct Lookup {
    explicit Lookup(const net::any_io_executor& ex) : wake(ex, Clock::time_point::max()) {}
    Timer wake;
    bool done = false;
    error_code ec;
    tcp::resolver::results_type results;
};

awaitable<void> run_lookup(std::shared_ptr<Lookup> lookup, std::string host, std::string service) {
    Resolver resolver(lookup->wake.get_executor());
    auto [ec, results] = co_await resolver.async_resolve(host, service);
    lookup->ec = ec;
    lookup->results = std::move(results);
    lookup->done = true;
    lookup->wake.cancel();
}

}  // namespace

awaitable<std::pair<Failure, error_code>> Client::Impl::connect(detail::Conn& c, const Endpoint& ep,
                                                                const Timeouts& t) {
    error_code ec;
    auto addr = net::ip::make_address(ep.host, ec);
    if (!ec) {
        c.stream.expires_after(t.connect);
        auto [cec] = co_await c.stream.async_connect(tcp::endpoint(addr, ep.port), use_tuple);
        ec = cec;
    } else {
        // A DNS name: the lookup gets Timeouts::connect, then the connect gets it again.
        auto lookup = std::make_shared<Lookup>(executor);
        lookup->wake.expires_after(t.connect);
        net::co_spawn(executor, run_lookup(lookup, ep.host, std::to_string(ep.port)),
                      net::detached);
        auto [wec] = co_await lookup->wake.async_wait();  // ends early when the lookup is done
        (void)wec;
        auto cs = co_await net::this_coro::cancellation_state;
        if (cs.cancelled() != net::cancellation_type::none) {
            co_return std::pair{Failure::Canceled, error_code{net::error::operation_aborted}};
        }
        if (!lookup->done) {
            co_return std::pair{Failure::ConnectTimeout, error_code{beast::error::timeout}};
        }
        if (lookup->ec) {
            co_return std::pair{Failure::Connect, lookup->ec};
        }
        c.stream.expires_after(t.connect);
        auto [cec, endpoint] = co_await c.stream.async_connect(lookup->results, use_tuple);
        (void)endpoint;
        ec = cec;
    }
    if (ec) {
        Failure f = Failure::Connect;
        if (ec == beast::error::timeout) {
            f = Failure::ConnectTimeout;
        } else if (ec == net::error::operation_aborted) {
            f = Failure::Canceled;
        }
        close_conn(c);
        co_return std::pair{f, ec};
    }
    c.stream.expires_never();  // later reads run under Conn::deadline
    error_code opt_ec;
    c.stream.socket().set_option(tcp::no_delay(true), opt_ec);
    co_return std::pair{Failure::None, error_code{}};
}

namespace detail {

bool final_status(unsigned status) noexcept {
    return status >= 200 && status <= 599 && status != 204 && status != 205 && status != 304;
}

bool answers_request(const PreparedRequest& req, const wire::ResponseFields& head) noexcept {
    if (req.request_id.empty()) {
        return true;
    }
    const auto* answered = wire::find_field(head, kRequestIdHeader);
    return answered == nullptr || answered->value() == req.request_id;
}

bool plain_coding(const wire::ResponseFields& head) noexcept {
    // One walk over the fields (see net/common/fields.hpp).
    std::size_t te_fields = 0;
    for (const auto& f : head) {
        if (f.name() == http::field::content_encoding &&
            !ascii::iequals(ascii::trim(f.value()), "identity")) {
            return false;
        }
        if (f.name() == http::field::transfer_encoding &&
            (++te_fields > 1 || !ascii::iequals(ascii::trim(f.value()), "chunked"))) {
            return false;
        }
    }
    return true;
}

bool is_stale_error(const error_code& ec) noexcept {
    return ec == http::error::end_of_stream || ec == net::error::eof ||
           ec == net::error::connection_reset || ec == net::error::broken_pipe ||
           ec == net::error::connection_aborted || ec == net::error::not_connected;
}

Failure classify_write(const error_code& ec) noexcept {
    if (ec == beast::error::timeout) {
        return Failure::ResponseTimeout;
    }
    if (ec == net::error::operation_aborted) {
        return Failure::Canceled;
    }
    return Failure::Write;
}

Failure classify_read(const error_code& ec, Failure on_timeout) noexcept {
    if (ec == beast::error::timeout) {
        return on_timeout;
    }
    if (ec == net::error::operation_aborted) {
        return Failure::Canceled;
    }
    if (ec == http::error::body_limit) {
        return Failure::TooLarge;
    }
    if (&ec.category() == &http::make_error_code(http::error::bad_method).category() &&
        ec != http::error::end_of_stream && ec != http::error::partial_message) {
        return Failure::Protocol;  // unparsable answer, or over the head size limit
    }
    return Failure::Read;
}

}  // namespace detail

}  // namespace pdr::upstream
