#include "net/upstream/client.hpp"

#include "net/upstream/pool.hpp"

#include "config/ascii.hpp"
#include "net/common/error.hpp"
#include "net/common/fields.hpp"
#include "net/common/http_wire.hpp"
#include "net/common/request_id.hpp"

#include <array>
#include <charconv>

namespace pdr::upstream {

std::string Endpoint::authority() const {
    std::string out;
    const bool v6 = host.find(':') != std::string::npos;
    out.reserve(host.size() + 8);
    if (v6) {
        out += '[';
    }
    out += host;
    if (v6) {
        out += ']';
    }
    out += ':';
    out += std::to_string(port);
    return out;
}

std::string_view to_string(Failure f) noexcept {
    switch (f) {
        case Failure::None:
            return "none";
        case Failure::Connect:
            return "connect";
        case Failure::ConnectTimeout:
            return "connect_timeout";
        case Failure::Write:
            return "write";
        case Failure::ResponseTimeout:
            return "response_timeout";
        case Failure::IdleTimeout:
            return "idle_timeout";
        case Failure::Read:
            return "read";
        case Failure::Protocol:
            return "protocol";
        case Failure::TooLarge:
            return "too_large";
        case Failure::Canceled:
            return "canceled";
    }
    return "unknown";
}

std::string describe(Failure f, const error_code& ec) {
    std::string out(to_string(f));
    if (ec && ec != beast::error::timeout && ec != net::error::operation_aborted) {
        out.append(" (").append(ec.message()).append(")");
    }
    return out;
}

namespace {

// The head of `req` as sent to `authority`: the request line, its fields, then Host (unless it
// has its own) and Content-Length where the request has a body or its method calls for one
// (what Beast's prepare_payload and serializer write).
void serialize_head(std::string& out, const PreparedRequest& req, std::string_view authority) {
    out.clear();
    const std::string_view method = http::to_string(req.method);
    out.reserve(method.size() + req.target.size() + req.fields.size() + authority.size() + 64);
    out.append(method).append(" ").append(req.target).append(" HTTP/1.1\r\n");
    out.append(req.fields);
    if (!req.has_host) {
        out.append("Host: ").append(authority).append("\r\n");
    }
    if (!req.body.empty() || req.method == http::verb::post || req.method == http::verb::put ||
        req.method == http::verb::options) {
        char digits[24];
        const auto [end, ec] = std::to_chars(digits, digits + sizeof digits, req.body.size());
        (void)ec;
        out.append("Content-Length: ").append(digits, end).append("\r\n");
    }
    out.append("\r\n");
}

// Sends the request: head and body in one gather write, at once when the socket takes it all
// (no coroutine, the usual case). Otherwise returns the awaitable that sends the rest under
// `timeout`; await it at once (it refers to `c.request_buffers`, and so to `req`'s body). The
// caller has armed the stream's timer for the exchange.
std::optional<awaitable<error_code>> write_request(detail::Conn& c, const PreparedRequest& req,
                                                   std::string_view authority, Duration timeout,
                                                   error_code& ec) {
    serialize_head(c.head_buf, req, authority);
    c.request_buffers = {net::buffer(c.head_buf), net::buffer(req.body)};
    return wire::send_or_rest(c.stream, c.request_buffers, timeout, ec);
}

// A Request as the same PreparedRequest: its fields serialized in their order (Host among them
// when it has one), its body, its X-Request-Id.
PreparedRequest prepared(Request req) {
    PreparedRequest p;
    p.method = req.method();
    p.target = std::string(req.target());
    p.keep_alive = req.keep_alive();
    for (const auto& f : req) {
        if (f.name() == http::field::content_length || f.name() == http::field::transfer_encoding) {
            continue;  // the body goes out whole, with its own length (as prepare_payload did)
        }
        p.has_host = p.has_host || f.name() == http::field::host;
        p.add(f.name_string(), f.value());
    }
    p.request_id = std::string(wire::field_value(req, kRequestIdHeader));
    p.body = std::move(req.body());
    return p;
}

// A request that may be sent again when a reused connection ends before any answer (RFC 9110
// 9.2.2): the upstream may have closed it just as the request went out, or it may have taken
// the request and failed; only an idempotent one may be repeated without knowing which. A
// completion or a prefill is never sent twice (the engine would run it twice; a decode would
// read the same KV handle twice): that ends as a failure the flow's own retry rules handle.
bool may_resend(const PreparedRequest& req) {
    return req.method == http::verb::get || req.method == http::verb::head;
}

// Why an answer's head cannot be relayed (a protocol failure): it names another request
// (X-Request-Id), or it has a content or transfer coding the router does not pass on. Clear
// when it can.
error_code unrelayable_head(const PreparedRequest& req, const wire::ResponseFields& head) {
    if (!detail::answers_request(req, head)) {
        return Errc::UpstreamAnswerMismatch;
    }
    if (!detail::plain_coding(head)) {
        return Errc::UpstreamEncoding;
    }
    return {};
}

// Gets a connection: the newest live pooled one (reused = true) unless `fresh`, or a new one.
struct Acquired {
    Failure failure = Failure::None;
    error_code ec;
    detail::ConnPtr conn;
    bool reused = false;
};

// The pooled connection, without a coroutine (the usual case); false when there is none.
bool take_pooled(Client::Impl& impl, const std::string& key, Acquired& a) {
    a.conn = impl.take(key);
    if (a.conn) {
        a.reused = true;
        a.conn->set_busy(impl.busy);
    }
    return a.conn != nullptr;
}

awaitable<Acquired> connect_new(Client::Impl& impl, const Endpoint& ep, const std::string& key,
                                const Timeouts& t) {
    Acquired a;
    a.conn = std::make_unique<detail::Conn>(impl.executor);
    a.conn->key = key;
    auto [f, ec] = co_await impl.connect(*a.conn, ep, t);
    a.failure = f;
    a.ec = ec;
    if (f != Failure::None) {
        a.conn.reset();
    } else {
        a.conn->set_busy(impl.busy);
    }
    co_return a;
}

// Whether an answer may be waiting after the request's write failed: an upstream that answers
// before it has read the whole request (a 413 to a body over its limit) and closes makes the
// write fail (reset, broken pipe) with its answer already in our receive buffer. That answer is
// read and relayed instead of a write error. Not on a reused connection whose write found it
// closed (the upstream closed it while idle: nothing was answered), nor after a timeout or a
// cancel.
bool answer_may_wait(const Acquired& a, const error_code& wec) {
    return detail::classify_write(wec) == Failure::Write &&
           !(a.reused && detail::is_stale_error(wec));
}

}  // namespace

Client::Client(net::any_io_executor executor, PoolLimits limits)
    : impl_(std::make_shared<Impl>(std::move(executor), limits)) {}

Client::~Client() {
    impl_->close_all();
}

std::string_view PreparedRequest::field(std::string_view name) const {
    std::string_view rest = fields;
    while (!rest.empty()) {
        const auto eol = rest.find("\r\n");
        const std::string_view line = rest.substr(0, eol);
        rest.remove_prefix(eol == std::string_view::npos ? rest.size() : eol + 2);
        const auto colon = line.find(':');
        if (colon == name.size() && beast::iequals(line.substr(0, colon), name)) {
            return ascii::trim(line.substr(colon + 1));
        }
    }
    return {};
}

awaitable<Result> Client::request(const Endpoint& ep, Request req, Timeouts t) {
    return request(ep, prepared(std::move(req)), t);
}

awaitable<Client::Opened> Client::open(const Endpoint& ep, Request req, Timeouts t) {
    return open(ep, prepared(std::move(req)), t);
}

awaitable<Result> Client::request(const Endpoint& ep, PreparedRequest req, Timeouts t) {
    std::shared_ptr<Impl> impl = impl_;
    const std::string key = ep.authority();
    Result r;
    try {
        for (int attempt = 0; attempt < 2; ++attempt) {
            Acquired a;
            if (attempt > 0 || !take_pooled(*impl, key, a)) {
                a = co_await connect_new(*impl, ep, key, t);
            }
            if (!a.conn) {
                r.failure = a.failure;
                r.ec = a.ec;
                co_return r;
            }
            detail::Conn& c = *a.conn;
            c.deadline.expires_after(t.response);  // the whole exchange
            error_code wec;
            if (auto rest = write_request(c, req, key, t.response, wec)) {
                wec = co_await std::move(*rest);
            }
            wec = detail::io_error(c, wec);
            if (wec && !answer_may_wait(a, wec)) {
                if (a.reused && detail::is_stale_error(wec)) {
                    continue;
                }
                r.failure = detail::classify_write(wec);
                r.ec = wec;
                co_return r;
            }
            // After a failed write the connection is never reused, whatever the answer says.
            detail::StreamImpl s(impl, key, std::move(a.conn), t, req.keep_alive && !wec,
                                 req.method == http::verb::head, impl->limits.max_response_body,
                                 /*whole_exchange=*/true);
            auto [f, rec] = co_await s.read_head();
            if (f != Failure::None && wec) {  // no early answer either: the write's failure
                r.failure = detail::classify_write(wec);
                r.ec = wec;
                co_return r;
            }
            if (f != Failure::None) {
                if (a.reused && may_resend(req) && !s.got_some() && detail::is_stale_error(rec)) {
                    continue;
                }
                r.failure = f;
                r.ec = rec;
                co_return r;
            }
            if (const error_code hec = unrelayable_head(req, s.head())) {
                r.failure = Failure::Protocol;
                r.ec = hec;
                co_return r;  // the connection is dropped with `s`
            }
            std::string body;
            if (!s.take_whole_body(body)) {
                f = co_await s.read_all(body);
            }
            if (f != Failure::None) {
                r.failure = wec ? detail::classify_write(wec) : f;
                r.ec = wec ? wec : s.error();
                co_return r;
            }
            r.response = Response(std::move(s.head()), std::move(body));
            co_return r;
        }
    } catch (const boost::system::system_error& e) {
        // The calling coroutine was cancelled between two operations.
        r.failure = Failure::Canceled;
        r.ec = e.code();
    }
    co_return r;
}

awaitable<Client::Opened> Client::open(const Endpoint& ep, PreparedRequest req, Timeouts t) {
    std::shared_ptr<Impl> impl = impl_;
    std::string key = ep.authority();
    Opened o;
    try {
        for (int attempt = 0; attempt < 2; ++attempt) {
            Acquired a;
            if (attempt > 0 || !take_pooled(*impl, key, a)) {
                a = co_await connect_new(*impl, ep, key, t);
            }
            if (!a.conn) {
                o.failure = a.failure;
                o.ec = a.ec;
                co_return o;
            }
            a.conn->deadline.expires_after(t.response);  // the write, then read_head
            error_code wec;
            if (auto rest = write_request(*a.conn, req, key, t.response, wec)) {
                wec = co_await std::move(*rest);
            }
            wec = detail::io_error(*a.conn, wec);
            if (wec && !answer_may_wait(a, wec)) {
                if (a.reused && detail::is_stale_error(wec)) {
                    continue;
                }
                o.failure = detail::classify_write(wec);
                o.ec = wec;
                co_return o;
            }
            // After a failed write the connection is never reused, whatever the answer says.
            const bool keep_alive = req.keep_alive && !wec;
            auto s = std::make_unique<detail::StreamImpl>(
                impl, key, std::move(a.conn), t, keep_alive, req.method == http::verb::head,
                impl->limits.max_response_body);
            auto [f, ec] = co_await s->read_head();
            if (f != Failure::None && wec) {  // no early answer either
                o.failure = detail::classify_write(wec);
                o.ec = wec;
                co_return o;
            }
            if (f != Failure::None) {
                if (a.reused && may_resend(req) && !s->got_some() && detail::is_stale_error(ec)) {
                    continue;
                }
                o.failure = f;
                o.ec = ec;
                co_return o;
            }
            if (const error_code hec = unrelayable_head(req, s->head())) {
                o.failure = Failure::Protocol;
                o.ec = hec;
                co_return o;  // the connection is dropped with `s`
            }
            o.stream = std::move(s);
            co_return o;
        }
    } catch (const boost::system::system_error& e) {
        o.failure = Failure::Canceled;
        o.ec = e.code();
        o.stream.reset();
    }
    co_return o;
}

void Client::close_idle() {
    impl_->close_all();
}

std::size_t Client::sweep_idle() {
    return impl_->sweep();
}

std::size_t Client::fail_stalled(const Endpoint& ep, Duration quiet) {
    return impl_->fail_stalled(ep.authority(), quiet);
}

void Client::close_idle(const Endpoint& ep) {
    impl_->close_key(ep.authority());
}

std::size_t Client::idle_connections() const noexcept {
    return impl_->idle_count;
}

Errc errc_for(Failure f) noexcept {
    using F = Failure;
    switch (f) {
        case F::Connect:
            return Errc::UpstreamConnect;
        case F::ConnectTimeout:
        case F::ResponseTimeout:
        case F::IdleTimeout:
            return Errc::UpstreamTimeout;
        case F::Protocol:
        case F::TooLarge:
            return Errc::UpstreamProtocol;
        case F::Write:
        case F::Read:
            return Errc::UpstreamClosed;
        case F::Canceled:
            return Errc::ShuttingDown;
        case F::None:
            break;
    }
    return Errc::Internal;
}

}  // namespace pdr::upstream
