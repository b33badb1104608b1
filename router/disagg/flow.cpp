#include "router/disagg/flow.hpp"

#include "net/common/log.hpp"
#include "net/common/log_limit.hpp"

namespace pdr::disagg {

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
        case F::TooLarge:
            return K::Protocol;
        case F::Read:
        case F::Canceled:
        case F::None:
            break;
    }
    return K::Read;
}

std::string describe_failure(const config::Config& cfg, upstream::Failure f, const error_code& ec) {
    if (f == upstream::Failure::TooLarge) {
        return "answered a body over the --max-upstream-body-bytes limit of " +
               std::to_string(cfg.max_upstream_body_bytes) + " bytes";
    }
    return upstream::describe(f, ec);
}

std::string status_reason(unsigned status, std::string_view body) {
    constexpr std::size_t kMaxBody = 200;
    std::string s = "answered HTTP " + std::to_string(status);
    if (!body.empty()) {
        s.append(": ").append(body.substr(0, kMaxBody));
    }
    return s;
}

double seconds_since(Clock::time_point t) noexcept {
    return std::chrono::duration<double>(Clock::now() - t).count();
}

namespace {

// `what` for `leg` and `instance`, at most once per second for each of the three together and
// the failure's class (a line left out goes out at DEBUG instead). An engine's 4xx answer (a
// prompt it refused, relayed) is a class of its own: clients can cause those at will, and they
// must not push an instance's transport or protocol failures out of the log.
void log_leg(LogLimiter& limiter, std::string_view what, const server::Exchange& client,
             std::string_view request_id, std::string_view leg, std::string_view instance,
             std::string_view reason) {
    if (log::level() > log::Level::Warn) {
        return;
    }
    if (instance.empty()) {
        instance = "-";
    }
    const bool client_error =
        reason.starts_with("status 4") || reason.find("answered HTTP 4") != std::string_view::npos;
    std::string kind;
    kind.reserve(leg.size() + instance.size() + 5);
    kind.append(leg).append(" ").append(instance).append(client_error ? " 4xx" : "");
    std::string note;
    const bool allowed = limiter.allow(kind, note);
    if (!allowed && log::level() > log::Level::Debug) {
        return;
    }
    std::string line;
    line.reserve(what.size() + leg.size() + instance.size() + reason.size() + note.size() + 80);
    line.append(what).append(": leg=").append(leg);
    line.append(" instance=").append(instance);
    line.append(" reason=").append(reason);
    line.append(" client=").append(client.remote_address()).append(note);
    log::write(allowed ? log::Level::Warn : log::Level::Debug, kLogComponent, line, request_id);
}

}  // namespace

void log_failure(const server::Exchange& client, std::string_view request_id, std::string_view leg,
                 std::string_view instance, std::string_view reason) {
    static LogLimiter limiter;
    log_leg(limiter, "request failed", client, request_id, leg, instance, reason);
}

awaitable<void> respond_no_instance(FlowDeps& deps, FlowRequest& req, metrics::Leg leg) {
    const bool prefill = leg == metrics::Leg::Prefill;
    const std::string_view why =
        prefill ? "no healthy prefill instance" : "no healthy decode instance";
    deps.metrics.upstream_error(leg, metrics::UpstreamErrorKind::NoInstance);
    log_failure(req, prefill ? "prefill" : "decode", {}, why);
    co_await respond_error(req.exchange, prefill ? Errc::NoPrefillInstance : Errc::NoDecodeInstance,
                           why);
}

void log_retry(const server::Exchange& client, std::string_view request_id, std::string_view leg,
               std::string_view instance, std::string_view reason) {
    static LogLimiter limiter;
    log_leg(limiter, "leg attempt failed, retrying on another instance", client, request_id, leg,
            instance, reason);
}

}  // namespace pdr::disagg
