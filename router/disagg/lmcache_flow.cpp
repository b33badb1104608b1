#include "router/disagg/lmcache_flow.hpp"

#include "net/common/log.hpp"
#include "net/common/shared_state.hpp"
#include "router/disagg/attempts.hpp"
#include "router/disagg/decode_leg.hpp"
#include "router/disagg/lmcache_rewrite.hpp"
#include "router/disagg/prefill_leg.hpp"
#include "router/kv/kv_ready_listener.hpp"
#include "router/kv/kv_ready_owner.hpp"

#include <chrono>

namespace pdr::disagg {

namespace {

using lmcache::Api;
using metrics::Leg;

bool has_receiver(const instances::Instance& d) {
    return !d.kv.lmcache.empty();
}

// What the prefill side (tokenize, then prefill with the disagg_spec) ended with.
struct PrefillSide {
    bool answered = false;  // the client has been answered (an error), or is gone
    instances::InstancePtr prefill;
    std::vector<std::int64_t> tokens;
    lmcache::FirstToken first;
    std::string req_id;
    kv::KvReadyListener::Registration ready;  // set when a disagg_spec went out
};

// One POST to P. Failures are counted and reported on the instance; `reason` is set when the
// answer is not a 2xx (with `status`), `failure` when there is none.
struct PostResult {
    upstream::Result result;
    unsigned status = 0;
};

awaitable<PostResult> post_to(FlowDeps& deps, FlowRequest& req, instances::Instance& p,
                              std::string_view target, std::string body) {
    const upstream::Timeouts timeouts{deps.cfg.connect_timeout, deps.cfg.prefill_timeout,
                                      deps.cfg.prefill_timeout};
    upstream::PreparedRequest r = make_leg_request(http::verb::post, target, req.request_id,
                                                   req.headers, std::move(body), p.upstream_key);
    PostResult out;
    out.result = co_await deps.client.request(p.endpoint, std::move(r), timeouts);
    out.status = out.result.ok() ? out.result.response.result_int() : 0;
    co_return out;
}

// Tokenizes the prompt (unless the client sent token ids) and runs the prefill with the
// disagg_spec for `decode` on one P, retrying on another P while nothing was sent (connect
// failures; /tokenize also on 5xx and timeouts: it moves no KV). Once P may have started moving
// KV, a failure is the client's error and D is never called.
awaitable<PrefillSide> run_prefill_side(FlowDeps& deps, FlowRequest& req,
                                        const lmcache::ClientAsk& ask,
                                        const instances::Instance& decode) {
    PrefillSide side;
    side.answered = true;
    InstanceAttempts tries(deps.registry, Role::Prefill, deps.cfg.prefill_retries,
                           req.prefill_hint);
    Errc last_errc = Errc::UpstreamConnect;
    const bool first_only = ask.max_tokens && *ask.max_tokens == 1;
    while (instances::InstancePtr p = tries.next()) {
        if (tries.is_retry()) {
            deps.metrics.retry(Leg::Prefill);
        }
        const Clock::time_point leg_start = Clock::now();
        // 1. Tokenize.
        if (ask.tokens) {
            side.tokens = *ask.tokens;
        } else {
            PostResult tok = co_await post_to(deps, req, *p, "/tokenize",
                                              lmcache::make_tokenize_body(req.body, ask));
            if (tok.result.failure == upstream::Failure::Canceled || req.exchange.client_gone()) {
                deps.metrics.client_disconnect(metrics::DisconnectPhase::Prefill);
                co_return side;
            }
            std::string reason;
            if (!tok.result.ok()) {
                deps.metrics.upstream_error(Leg::Prefill, error_kind_for(tok.result.failure));
                reason = "/tokenize: " + upstream::describe(tok.result.failure, tok.result.ec);
                last_errc = errc_for(tok.result.failure);
                deps.registry.report_leg_failure(*p, tok.result.failure, reason);
            } else if (tok.status >= 500) {
                deps.metrics.upstream_error(Leg::Prefill, metrics::UpstreamErrorKind::Status5xx);
                reason = "/tokenize " + status_reason(tok.status, tok.result.response.body());
                last_errc = Errc::UpstreamProtocol;
                deps.registry.report_error(*p, reason);
            } else if (tok.status >= 400) {
                // The prompt itself is bad (too long, a bad template): P's answer is the client's.
                deps.registry.report_success(*p);
                deps.metrics.upstream_error(Leg::Prefill, metrics::UpstreamErrorKind::Status4xx);
                log_failure(req, "prefill", p->name, "/tokenize " + status_reason(tok.status, {}));
                co_await respond_relayed(req.exchange, tok.status,
                                         tok.result.response[http::field::content_type],
                                         std::move(tok.result.response.body()));
                co_return side;
            } else {
                std::string why;
                if (!lmcache::parse_tokens(tok.result.response.body(), side.tokens, why)) {
                    deps.metrics.upstream_error(Leg::Prefill, metrics::UpstreamErrorKind::Protocol);
                    reason = why;
                    last_errc = Errc::UpstreamProtocol;
                    deps.registry.report_error(*p, reason);
                }
            }
            if (!reason.empty()) {
                tries.failed(p->client_name() + " " + reason);
                if (!tries.last()) {
                    log_retry(req, "prefill", p->name, reason);
                    continue;
                }
                log_failure(req, "prefill", p->name, reason);
                co_await respond_error(req.exchange, last_errc,
                                       "prefill instance " + tries.last_error());
                co_return side;
            }
        }

        // 2. Prefill. A request with max_tokens 1 is answered from P's token alone: P gets no
        // disagg_spec, so it moves no KV and sends no notification.
        lmcache::DisaggSpec spec;
        if (!first_only) {
            // Random, never the client's id (kv_ready_owner.hpp). A retry on another P reuses
            // it: it follows only a failure that sent nothing. With several replicas it ends in
            // "@<replica id>", so whichever replica gets the notification can send it here.
            spec.req_id = kv::kv_req_id(deps.cfg.replica_id);
            spec.receiver_host =
                decode.kv.lmcache.host.empty() ? decode.endpoint.host : decode.kv.lmcache.host;
            spec.init_ports = decode.kv.lmcache.init_ports;
            spec.alloc_ports = decode.kv.lmcache.alloc_ports;
            const std::size_t expected = p->kv.kv_ready_expected > 0
                                             ? static_cast<std::size_t>(p->kv.kv_ready_expected)
                                             : spec.init_ports.size();
            // Registered before P can send anything, so no notification of it is an orphan.
            side.ready = deps.kv_ready->expect(spec.req_id, expected);
            if (!side.ready.ok()) {
                const std::string why =
                    "cannot wait for KV-ready notifications: " + std::string(side.ready.error()) +
                    " (--kv-ready-max-pending)";
                log_failure(req, "prefill", p->name, why);
                co_await respond_error(req.exchange, Errc::TooManyRequests, why);
                co_return side;
            }
        }
        const lmcache::DisaggSpec* spec_sent = first_only ? nullptr : &spec;
        std::string prefill_body = lmcache::make_prefill_body(req.body, side.tokens, spec_sent);
        PostResult pre =
            co_await post_to(deps, req, *p, "/v1/completions", std::move(prefill_body));
        if (pre.result.failure == upstream::Failure::Canceled || req.exchange.client_gone()) {
            deps.metrics.client_disconnect(metrics::DisconnectPhase::Prefill);
            co_return side;
        }
        deps.metrics.leg_done(Leg::Prefill, seconds_since(leg_start));
        std::string reason;
        if (!pre.result.ok()) {
            deps.metrics.upstream_error(Leg::Prefill, error_kind_for(pre.result.failure));
            reason = upstream::describe(pre.result.failure, pre.result.ec);
            last_errc = errc_for(pre.result.failure);
            deps.registry.report_leg_failure(*p, pre.result.failure, reason);
            if (upstream::request_not_sent(pre.result.failure) && !tries.last()) {
                side.ready = {};
                tries.failed(p->client_name() + " " + reason);
                log_retry(req, "prefill", p->name, reason);
                continue;
            }
        } else if (pre.status >= 500) {
            deps.metrics.upstream_error(Leg::Prefill, metrics::UpstreamErrorKind::Status5xx);
            reason = status_reason(pre.status, pre.result.response.body());
            last_errc = Errc::UpstreamProtocol;
            deps.registry.report_error(*p, reason);
        } else if (pre.status >= 400) {
            deps.registry.report_success(*p);
            deps.metrics.upstream_error(Leg::Prefill, metrics::UpstreamErrorKind::Status4xx);
            log_failure(req, "prefill", p->name, status_reason(pre.status, {}));
            co_await respond_relayed(req.exchange, pre.status,
                                     pre.result.response[http::field::content_type],
                                     std::move(pre.result.response.body()),
                                     pre.result.response[http::field::retry_after]);
            co_return side;
        } else {
            std::string why;
            if (!lmcache::parse_first_token(pre.result.response.body(), side.first, why)) {
                deps.metrics.upstream_error(Leg::Prefill,
                                            metrics::UpstreamErrorKind::MissingKvParams);
                reason = why;
                last_errc = Errc::MissingKvParams;
                deps.registry.report_error(*p, reason);
            }
        }
        if (!reason.empty()) {
            // P may have moved KV or notified already: no other P, and D is never called.
            tries.failed(p->client_name() + " " + reason);
            log_failure(req, "prefill", p->name, reason);
            co_await respond_error(req.exchange, last_errc,
                                   "prefill instance " + tries.last_error());
            co_return side;
        }
        deps.registry.report_success(*p);
        side.prefill = std::move(p);
        side.req_id = std::move(spec.req_id);
        side.answered = false;
        co_return side;
    }
    co_await respond_prefill_attempts_used(deps, req, tries, last_errc);
    co_return side;
}

// The answer from P's token alone (max_tokens 1, or P stopped at its first token).
awaitable<void> respond_first_only(FlowDeps& deps, FlowRequest& req,
                                   lmcache::AnswerShaper& shaper) {
    deps.metrics.first_byte(req.route, seconds_since(req.started));
    if (!req.stream) {
        co_await respond_relayed(req.exchange, 200, "application/json", shaper.first_only_whole());
        co_return;
    }
    http::response<http::empty_body> head{http::status::ok, req.exchange.request().version()};
    head.set(http::field::content_type, "text/event-stream");
    head.set(http::field::cache_control, "no-cache");
    const error_code begun = co_await req.exchange.begin_stream_held(std::move(head));
    if (begun) {
        co_return;
    }
    error_code ec;
    const std::string events = shaper.first_only_stream();
    std::optional<awaitable<error_code>> rest = req.exchange.write_last_chunk_or_rest(events, ec);
    if (rest) {
        ec = co_await std::move(*rest);
    }
}

}  // namespace

awaitable<void> run_lmcache_flow(FlowDeps& deps, FlowRequest& req) {
    deps.metrics.flow_started(metrics::FlowMode::Lmcache);
    lmcache::ClientAsk ask;
    std::string error, param;
    const Api api = req.route == metrics::Route::ChatCompletions ? Api::Chat : Api::Completions;
    if (!lmcache::read_client_ask(req.body, api, req.stream, ask, error, param)) {
        co_await respond_error(req.exchange, Errc::InvalidField, error, param);
        co_return;
    }
    // Both roles must be up before P does any work for a request D cannot take; in this mode a
    // D is usable only with its receiver ports.
    if (deps.registry.count(Role::Prefill, true) == 0) {
        co_await respond_no_instance(deps, req, Leg::Prefill);
        co_return;
    }
    if (deps.registry.count_usable(Role::Decode, has_receiver) == 0) {
        if (deps.registry.count(Role::Decode, true) == 0) {
            co_await respond_no_instance(deps, req, Leg::Decode);
            co_return;
        }
        deps.metrics.upstream_error(Leg::Decode, metrics::UpstreamErrorKind::NoInstance);
        const std::string why =
            "no decode instance has LMCache receiver ports (--lmcache-init-ports and "
            "--lmcache-alloc-ports, or lmcache_init_ports/lmcache_alloc_ports in "
            "/instances/add); see GET /status";
        log_failure(req, "decode", {}, why);
        co_await respond_error(req.exchange, Errc::NoDecodeInstance, why);
        co_return;
    }
    LegCanceler canceler;

    // D is chosen first: P sends the KV straight to its receiver. D is held in flight for the
    // whole request.
    // Picked and counted in flight in one step (see InstanceAttempts::next).
    instances::InstancePtr decode;
    instances::InFlight decode_held;
    {
        const SharedLock lock;
        decode = deps.registry.pick(Role::Decode, nullptr, has_receiver);
        if (decode) {
            decode_held = deps.registry.acquire(decode);
        }
    }
    if (!decode) {  // went down meanwhile (nothing above awaited, so not in practice)
        co_await respond_no_instance(deps, req, Leg::Decode);
        co_return;
    }

    // 1-2. Tokenize and prefill: P computes the prompt's KV, sends it to D's receiver, notifies
    // the router once per TP rank, and answers the first token.
    PrefillSide side = co_await run_prefill_side(deps, req, ask, *decode);
    if (side.answered) {
        co_return;
    }
    const std::int64_t created = std::chrono::duration_cast<std::chrono::seconds>(
                                     std::chrono::system_clock::now().time_since_epoch())
                                     .count();
    lmcache::AnswerShaper shaper(ask, req.request_id, side.first,
                                 static_cast<std::int64_t>(side.tokens.size()), created);
    const bool p_stopped =
        !side.first.finish_reason.empty() && side.first.finish_reason != "length";
    if (!side.ready.ok() || p_stopped) {
        co_await respond_first_only(deps, req, shaper);
        co_return;
    }

    // 3. Wait until every rank's KV-ready notification arrived (bounded).
    const Clock::time_point wait_start = Clock::now();
    const kv::WaitEnd end = co_await side.ready.wait(wait_start + deps.cfg.kv_ready_timeout);
    deps.metrics.kv_ready_wait.Observe(seconds_since(wait_start));
    if (end == kv::WaitEnd::Cancelled || req.exchange.client_gone()) {
        deps.metrics.client_disconnect(metrics::DisconnectPhase::Handover);
        co_return;
    }
    if (end == kv::WaitEnd::Stopped) {
        co_await respond_error(req.exchange, Errc::ShuttingDown, "the router is shutting down");
        co_return;
    }
    if (end == kv::WaitEnd::TimedOut) {
        const bool proceed = deps.cfg.on_kv_ready_timeout == config::OnKvReadyTimeout::Proceed;
        deps.metrics.kv_ready_timeout(proceed ? metrics::KvReadyTimeoutPolicy::Proceed
                                              : metrics::KvReadyTimeoutPolicy::Error);
        const std::string why = "KV-ready notifications for req_id " + side.req_id + ": " +
                                std::to_string(side.ready.received()) + " of " +
                                std::to_string(side.ready.expected()) + " arrived from " +
                                side.prefill->client_name() + " within " +
                                std::to_string(deps.cfg.kv_ready_timeout.count()) + " ms";
        if (!proceed) {
            log_failure(req, "prefill", side.prefill->name, why);
            co_await respond_error(req.exchange, Errc::UpstreamTimeout,
                                   why + " (--on-kv-ready-timeout error)");
            co_return;
        }
        PDR_WARN(kLogComponent,
                 why + "; sending the decode leg anyway (--on-kv-ready-timeout proceed: " +
                     decode->name + " recomputes what it lacks)",
                 req.request_id);
    }
    side.ready = {};  // claimed: later notifications of this id are duplicates

    // 4. Decode on the chosen D: the token ids plus P's token; the answer shaped for the client.
    std::string body = lmcache::make_decode_body(req.body, ask, side.tokens, side.first.id);
    req.target = "/v1/completions";
    co_await run_decode_on(deps, req, canceler, std::move(body), *decode, &shaper);
}

}  // namespace pdr::disagg
