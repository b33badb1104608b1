#include "router/disagg/decode_leg.hpp"

#include "net/common/log.hpp"
#include "router/disagg/attempts.hpp"
#include "router/disagg/relay.hpp"

#include <algorithm>

namespace pdr::disagg {

namespace {

// Time D needs, at worst, to take a request: a full connect timeout, capped at a quarter of the
// lease so short (test) leases still leave room for the first attempt.
Duration handover_margin(const config::Config& cfg) {
    return std::min(cfg.connect_timeout, cfg.kv_lease_timeout / 4);
}

// One decode attempt on `decode`. Retry: the request was not sent and `may_retry`: `failure`
// says why, and another instance may be tried; Done: the client has been answered (or is gone).
enum class Attempt { Done, Retry };

awaitable<Attempt> attempt_on(FlowDeps& deps, FlowRequest& req, LegCanceler& canceler,
                              instances::Instance& decode, std::string body, bool may_retry,
                              KvHandover* handover, AnswerRewriter* rewriter,
                              std::string& failure) {
    const upstream::Timeouts timeouts{deps.cfg.connect_timeout, deps.cfg.decode_timeout,
                                      deps.cfg.decode_idle_timeout};
    upstream::PreparedRequest attempt_req =
        make_leg_request(http::verb::post, req.target, req.request_id, req.headers, std::move(body),
                         decode.upstream_key);
    const Clock::time_point leg_start = Clock::now();
    upstream::Client::Opened opened =
        co_await deps.client.open(decode.endpoint, std::move(attempt_req), timeouts);
    if (opened.failure == upstream::Failure::Canceled || req.exchange.client_gone()) {
        deps.metrics.client_disconnect(metrics::DisconnectPhase::Handover);
        co_return Attempt::Done;
    }
    if (opened.failure != upstream::Failure::None) {
        const upstream::Failure f = opened.failure;
        deps.metrics.upstream_error(metrics::Leg::Decode, error_kind_for(f));
        const std::string reason = upstream::describe(f, opened.ec);
        failure = decode.client_name() + ": " + reason;
        deps.registry.report_leg_failure(decode, f, reason);
        if (upstream::request_not_sent(f) && may_retry) {
            log_retry(req, "decode", decode.name, reason);
            co_return Attempt::Retry;
        }
        log_failure(req, "decode", decode.name, reason);
        co_await respond_error(req.exchange, errc_for(f), "decode instance " + failure);
        co_return Attempt::Done;
    }
    if (opened.stream->status() < 500) {
        deps.registry.report_success(decode);
    }
    {
        LegCanceler::Registration open = canceler.add(*opened.stream);
        co_await relay_answer(deps, req, *opened.stream, decode, handover, rewriter);
    }
    deps.metrics.leg_done(metrics::Leg::Decode, seconds_since(leg_start));
    co_return Attempt::Done;
}

}  // namespace

awaitable<void> run_decode_leg(FlowDeps& deps, FlowRequest& req, LegCanceler& canceler,
                               std::string body, KvHandover* handover) {
    InstanceAttempts tries(deps.registry, Role::Decode, deps.cfg.decode_retries);
    for (;;) {
        if (handover != nullptr &&
            handover->valid_until() - Clock::now() < handover_margin(deps.cfg)) {
            deps.metrics.upstream_error(metrics::Leg::Decode,
                                        metrics::UpstreamErrorKind::KvLeaseExpiring);
            const std::string why =
                "the prefill's KV lease would expire before a decode instance "
                "could take the request" +
                (tries.last_error().empty() ? "" : " (last try: " + tries.last_error() + ")");
            log_failure(req, "decode", tries.last_failed(), why);
            co_await respond_error(req.exchange, Errc::UpstreamTimeout, why);
            co_return;
        }
        instances::InstancePtr decode = tries.next();
        if (!decode) {
            break;
        }
        if (tries.is_retry()) {
            deps.metrics.retry(metrics::Leg::Decode);
        }
        // Built per attempt: a retry is rare, so only the body is kept for it (not a whole copy).
        // (Not `last ? std::move(body) : body` inside the co_await: GCC 12 frees a conditional
        // argument's temporary too early there.)
        const bool last = tries.last();
        std::string attempt_body;
        if (last) {
            attempt_body = std::move(body);
        } else {
            attempt_body = body;
        }
        std::string failure;
        const Attempt a = co_await attempt_on(deps, req, canceler, *decode, std::move(attempt_body),
                                              !last, handover, nullptr, failure);
        if (a == Attempt::Done) {
            co_return;
        }
        tries.failed(std::move(failure));
    }
    if (tries.tried() == 0) {
        co_await respond_no_instance(deps, req, metrics::Leg::Decode);
    } else {
        log_failure(
            req, "decode", tries.last_failed(),
            "no other healthy decode instance to retry on (last try: " + tries.last_error() + ")");
        co_await respond_error(req.exchange, Errc::UpstreamConnect,
                               "could not reach a decode instance: " + tries.last_error());
    }
}

awaitable<void> run_decode_on(FlowDeps& deps, FlowRequest& req, LegCanceler& canceler,
                              std::string body, instances::Instance& decode,
                              AnswerRewriter* rewriter) {
    std::string failure;
    co_await attempt_on(deps, req, canceler, decode, std::move(body), false, nullptr, rewriter,
                        failure);
}

}  // namespace pdr::disagg
