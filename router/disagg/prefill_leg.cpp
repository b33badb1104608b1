#include "router/disagg/prefill_leg.hpp"

#include "net/common/fields.hpp"
#include "net/common/log.hpp"
#include "router/disagg/attempts.hpp"

namespace pdr::disagg {

using metrics::Leg;

awaitable<void> respond_prefill_attempts_used(FlowDeps& deps, FlowRequest& req,
                                              const InstanceAttempts& tries, Errc last_errc) {
    if (tries.tried() == 0) {
        co_await respond_no_instance(deps, req, Leg::Prefill);
        co_return;
    }
    log_failure(
        req, "prefill", tries.last_failed(),
        "no other healthy prefill instance to retry on (last try: " + tries.last_error() + ")");
    co_await respond_error(req.exchange, last_errc, "prefill instance " + tries.last_error());
}

awaitable<PrefillEnd> run_prefill_leg(FlowDeps& deps, FlowRequest& req, std::string body,
                                      KvHandle& handle, instances::InstancePtr& prefill) {
    const upstream::Timeouts timeouts{deps.cfg.connect_timeout, deps.cfg.prefill_timeout,
                                      deps.cfg.prefill_timeout};
    InstanceAttempts tries(deps.registry, Role::Prefill, deps.cfg.prefill_retries,
                           req.prefill_hint);
    Errc last_errc = Errc::UpstreamConnect;
    while (instances::InstancePtr p = tries.next()) {
        if (tries.is_retry()) {
            deps.metrics.retry(Leg::Prefill);
        }
        const bool last = tries.last();
        // Built per attempt: a retry is rare, so only the body is kept for it (not a whole copy).
        upstream::PreparedRequest attempt_req =
            make_leg_request(http::verb::post, req.target, req.request_id, req.headers,
                             last ? std::move(body) : body, p->upstream_key);
        const Clock::time_point leg_start = Clock::now();
        upstream::Result result =
            co_await deps.client.request(p->endpoint, std::move(attempt_req), timeouts);
        if (result.failure == upstream::Failure::Canceled || req.exchange.client_gone()) {
            deps.metrics.client_disconnect(metrics::DisconnectPhase::Prefill);
            co_return PrefillEnd::Answered;
        }
        deps.metrics.leg_done(Leg::Prefill, seconds_since(leg_start));
        const unsigned status = result.ok() ? result.response.result_int() : 0;
        const HandleStatus hs = result.ok() && status < 300
                                    ? parse_kv_handle(result.response.body(), handle)
                                    : HandleStatus::NotJson;
        std::string reason;  // set when this P is broken: another P is tried
        if (!result.ok()) {
            // Connect failure, timeout or broken answer.
            deps.metrics.upstream_error(Leg::Prefill, error_kind_for(result.failure));
            reason = describe_failure(deps.cfg, result.failure, result.ec);
            last_errc = errc_for(result.failure);
            deps.registry.report_leg_failure(*p, result.failure, reason);
        } else if (status >= 500) {
            deps.metrics.upstream_error(Leg::Prefill, metrics::UpstreamErrorKind::Status5xx);
            reason = status_reason(status, result.response.body());
            last_errc = Errc::UpstreamProtocol;
            deps.registry.report_error(*p, reason);
        } else if (status >= 400) {
            // The request itself is bad: P's answer goes to the client as it is. P answered, so
            // it is working (as for a decode 4xx): its error count starts again.
            deps.registry.report_success(*p);
            deps.metrics.upstream_error(Leg::Prefill, metrics::UpstreamErrorKind::Status4xx);
            log_failure(req, "prefill", p->name, status_reason(status, {}));
            const std::string_view ct =
                wire::field_value(result.response, http::field::content_type);
            const std::string_view retry_after =
                wire::field_value(result.response, http::field::retry_after);
            co_await respond_relayed(req.exchange, status, ct, std::move(result.response.body()),
                                     retry_after);
            co_return PrefillEnd::Answered;
        } else if (hs == HandleStatus::NotJson) {
            // An unparsable answer: P is broken (as for a 5xx), so another P is tried and three
            // in a row mark this one down.
            deps.metrics.upstream_error(Leg::Prefill, metrics::UpstreamErrorKind::Protocol);
            reason = "sent an answer (HTTP " + std::to_string(status) +
                     ") that is not a JSON object within the JSON limits";
            last_errc = Errc::UpstreamProtocol;
            deps.registry.report_error(*p, reason);
        } else if (hs == HandleStatus::Ok && handle.params.size() > deps.cfg.max_kv_params_bytes) {
            // Not passed on to a decode. A handle grows with the prompt (its block ids), so this
            // is P's answer to this prompt, not P's fault: P is not marked, and no other P is
            // tried (it would answer as big a handle).
            deps.registry.report_success(*p);
            deps.metrics.upstream_error(Leg::Prefill, metrics::UpstreamErrorKind::Protocol);
            const std::string why = "answered kv_transfer_params of " +
                                    std::to_string(handle.params.size()) +
                                    " bytes, over the --max-kv-params-bytes limit of " +
                                    std::to_string(deps.cfg.max_kv_params_bytes) +
                                    " (raise it to serve prompts this long)";
            log_failure(req, "prefill", p->name, why);
            co_await respond_error(req.exchange, Errc::UpstreamProtocol,
                                   "prefill instance " + p->client_name() + " " + why);
            co_return PrefillEnd::Answered;
        } else if (hs == HandleStatus::Ok && handle.transfer_mode == "push") {
            // A push producer (vLLM NixlPushConnector) behind a pull router: D's handshake would
            // fail late on the compatibility hash. A configuration error, not a broken instance:
            // its health is left as it is, and no other P is tried (as in push mode).
            deps.metrics.kv_mode_mismatches.Increment();
            deps.metrics.upstream_error(Leg::Prefill, metrics::UpstreamErrorKind::Protocol);
            const std::string why =
                "answered kv_transfer_params.transfer_mode \"push\" where the router runs "
                "--kv-mode pull: configure this prefill for pull (vLLM: kv_connector "
                "NixlConnector) or run the router with --kv-mode push";
            log_failure(req, "prefill", p->name, why);
            co_await respond_error(req.exchange, Errc::KvModeMismatch,
                                   "prefill instance " + p->client_name() + " " + why);
            co_return PrefillEnd::Answered;
        }
        if (!reason.empty()) {
            tries.failed(p->client_name() + " " + reason);
            if (!last) {
                log_retry(req, "prefill", p->name, reason);
                continue;
            }
            log_failure(req, "prefill", p->name, reason);
            co_await respond_error(req.exchange, last_errc,
                                   "prefill instance " + tries.last_error());
            co_return PrefillEnd::Answered;
        }
        deps.registry.report_success(*p);
        if (hs == HandleStatus::Ok) {
            prefill = std::move(p);
            co_return PrefillEnd::Handle;
        }
        deps.metrics.upstream_error(Leg::Prefill, metrics::UpstreamErrorKind::MissingKvParams);
        if (deps.cfg.on_missing_kv_params == config::OnMissingKvParams::Recompute) {
            // the request goes on: not a failure, but worth a line (decode redoes the prefill)
            log::write(log::Level::Warn, kLogComponent,
                       "prefill instance " + p->name +
                           " answered without kv_transfer_params; decode recomputes the prompt",
                       req.request_id);
            co_return PrefillEnd::Recompute;
        }
        log_failure(req, "prefill", p->name, "answer has no kv_transfer_params");
        co_await respond_error(req.exchange, Errc::MissingKvParams,
                               "prefill instance " + p->client_name() +
                                   " answered without kv_transfer_params (no KV handle to "
                                   "hand over to decode)");
        co_return PrefillEnd::Answered;
    }
    co_await respond_prefill_attempts_used(deps, req, tries, last_errc);
    co_return PrefillEnd::Answered;
}

}  // namespace pdr::disagg
