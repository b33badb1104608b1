#include "router/disagg/flow.hpp"

#include "net/common/log.hpp"

namespace pdr::disagg {

UpstreamCanceler::UpstreamCanceler(server::Exchange& ex) : state_(std::make_shared<State>()) {
    std::weak_ptr<State> weak = state_;
    ex.on_client_gone([weak] {
        if (auto s = weak.lock()) {
            s->gone = true;
            if (s->stream != nullptr) {
                s->stream->cancel();
            }
        }
    });
}

UpstreamCanceler::~UpstreamCanceler() {
    state_->stream = nullptr;
}

void UpstreamCanceler::set(upstream::ResponseStream* stream) noexcept {
    state_->stream = stream;
}

bool UpstreamCanceler::gone() const noexcept {
    return state_->gone;
}

metrics::UpstreamErrorKind error_kind_for(upstream::Failure f) noexcept {
    using F = upstream::Failure;
    using K = metrics::UpstreamErrorKind;
    switch (f) {
        case F::Connect:
            return K::Connect;
        case F::ConnectTimeout:
            return K::ConnectTimeout;
        case F::ResponseTimeout:
            return K::Timeout;
        case F::IdleTimeout:
            return K::IdleTimeout;
        case F::Write:
            return K::Write;
        case F::Protocol:
            return K::Protocol;
        case F::Read:
        case F::Canceled:
        case F::None:
            break;
    }
    return K::Read;
}

double seconds_since(Clock::time_point t) noexcept {
    return std::chrono::duration<double>(Clock::now() - t).count();
}

awaitable<void> respond_error(server::Exchange& ex, Errc e, std::string_view message,
                              std::string_view param) {
    if (ex.responded() || ex.client_gone()) {
        co_return;
    }
    server::Response res{error_info(e).status, ex.request().version()};
    res.set(http::field::content_type, "application/json");
    if (e == Errc::TooManyRequests) {
        res.set(http::field::retry_after, "1");  // slots free as requests end: soon
    }
    res.body() = openai_error_body(e, message, param);
    co_await ex.respond(std::move(res));
}

awaitable<void> respond_relayed(server::Exchange& ex, unsigned status,
                                std::string_view content_type, std::string body,
                                std::string_view retry_after) {
    if (ex.responded() || ex.client_gone()) {
        co_return;
    }
    server::Response res{static_cast<http::status>(status), ex.request().version()};
    if (!content_type.empty()) {
        res.set(http::field::content_type, content_type);
    }
    if (!retry_after.empty()) {
        res.set(http::field::retry_after, retry_after);
    }
    res.body() = std::move(body);
    co_await ex.respond(std::move(res));
}

namespace {

void log_leg(std::string_view what, std::string_view request_id, std::string_view leg,
             std::string_view instance, std::string_view reason) {
    if (log::level() > log::Level::Warn) {
        return;
    }
    std::string line;
    line.reserve(what.size() + leg.size() + instance.size() + reason.size() + 24);
    line.append(what).append(": leg=").append(leg);
    line.append(" instance=").append(instance.empty() ? "-" : instance);
    line.append(" reason=").append(reason);
    log::write(log::Level::Warn, kLogComponent, line, request_id);
}

}  // namespace

void log_failure(std::string_view request_id, std::string_view leg, std::string_view instance,
                 std::string_view reason) {
    log_leg("request failed", request_id, leg, instance, reason);
}

awaitable<void> respond_no_instance(FlowDeps& deps, FlowRequest& req, metrics::Leg leg) {
    const bool prefill = leg == metrics::Leg::Prefill;
    const std::string_view why =
        prefill ? "no healthy prefill instance" : "no healthy decode instance";
    deps.metrics.upstream_error(leg, metrics::UpstreamErrorKind::NoInstance);
    log_failure(req.request_id, prefill ? "prefill" : "decode", {}, why);
    co_await respond_error(req.exchange, prefill ? Errc::NoPrefillInstance : Errc::NoDecodeInstance,
                           why);
}

void log_retry(std::string_view request_id, std::string_view leg, std::string_view instance,
               std::string_view reason) {
    log_leg("leg attempt failed, retrying on another instance", request_id, leg, instance, reason);
}

}  // namespace pdr::disagg
