#include "router/disagg/push_flow.hpp"

#include "net/common/log.hpp"
#include "router/disagg/abort_guard.hpp"
#include "router/disagg/attempts.hpp"
#include "router/disagg/canceler.hpp"
#include "router/disagg/prefill_leg.hpp"
#include "router/disagg/push_rewrite.hpp"
#include "router/disagg/relay.hpp"
#include "router/kv/control_agent.hpp"

#include <boost/asio/experimental/awaitable_operators.hpp>

#include <optional>
#include <variant>

namespace pdr::disagg {

namespace {

using metrics::Leg;

// A one-shot event on the request's executor: raise() wakes every wait(), now and later.
class Signal {
public:
    explicit Signal(const net::any_io_executor& ex) : timer_(ex, Clock::time_point::max()) {}
    void raise() {
        if (!raised_) {
            raised_ = true;
            timer_.cancel();
        }
    }
    bool raised() const noexcept { return raised_; }
    awaitable<void> wait() {
        if (!raised_) {
            co_await timer_.async_wait();
        }
    }

private:
    Timer timer_;  // never expires; raise() cancels it
    bool raised_ = false;
};

// One dispatch of the pair (P, D) under one transfer id, and how each side of it ended.
struct Pair {
    explicit Pair(const net::any_io_executor& ex) : p_failed(ex), d_ended(ex) {}

    Signal p_failed;       // P failed before D's answer began: D's leg is cancelled
    Signal d_ended;        // D's leg ended: P's leg, if still out, is cancelled
    LegCanceler canceler;  // D's open stream, closed when P fails

    enum class PEnd { Pending, Ok, NotSent, Failed, Answered4xx, Cancelled, ClientGone };
    PEnd p_end = PEnd::Pending;
    Errc p_errc = Errc::Ok;
    std::string p_reason;       // "<instance> <what happened>"
    upstream::Result p_answer;  // P's 4xx, passed on to the client as it is

    enum class DEnd { Pending, Relayed, NotSent, Failed, Cancelled, ClientGone };
    DEnd d_end = DEnd::Pending;
    Errc d_errc = Errc::Ok;
    std::string d_reason;  // "<instance>: <what happened>"
    unsigned d_status = 0;
    bool d_first_byte = false;  // D's answer began: the KV landed (or D answered an error)
    bool kv_taken = false;      // D's answer began with a success status: D has the KV
    bool disconnect_counted = false;
};

class PairSink final : public FirstByteSink {
public:
    explicit PairSink(Pair& pair) : pair_(pair) {}
    void first_byte() override {
        pair_.d_first_byte = true;
        pair_.kv_taken = pair_.d_status < 400;
    }

private:
    Pair& pair_;
};

// Raises `d_ended` on every way out of the decode side.
struct EndsDecode {
    Pair& pair;
    ~EndsDecode() { pair.d_ended.raise(); }
};

// P failed: unless D's answer already began (then the KV is there and P's error does not
// matter to the client), D's leg is cancelled and the client gets P's error.
void prefill_failed(FlowRequest& req, Pair& pair, const instances::Instance& p) {
    if (pair.d_first_byte) {
        PDR_WARN(kLogComponent,
                 "prefill instance " + p.name + " failed after the decode answer began (" +
                     pair.p_reason + "); the answer goes on",
                 req.request_id);
        return;
    }
    pair.p_failed.raise();
    pair.canceler.cancel_all();
}

awaitable<void> prefill_side(FlowDeps& deps, FlowRequest& req, Pair& pair, instances::Instance& p,
                             std::string body, bool may_retry) {
    using namespace net::experimental::awaitable_operators;
    const upstream::Timeouts timeouts{deps.cfg.connect_timeout, deps.cfg.prefill_timeout,
                                      deps.cfg.prefill_timeout};
    upstream::PreparedRequest r = make_leg_request(http::verb::post, req.target, req.request_id,
                                                   req.headers, std::move(body), p.upstream_key);
    const Clock::time_point leg_start = Clock::now();
    auto leg = deps.client.request(p.endpoint, std::move(r), timeouts);
    auto stop = pair.d_ended.wait();
    auto either = std::move(leg) || std::move(stop);
    std::variant<upstream::Result, std::monostate> v = co_await std::move(either);
    if (pair.p_end != Pair::PEnd::Pending) {
        co_return;  // P's own Failed note came first (the transfer agent's watch)
    }
    if (v.index() == 1) {
        pair.p_end = Pair::PEnd::Cancelled;  // D's leg ended first: P's is no longer needed
        co_return;
    }
    upstream::Result result = std::move(std::get<0>(v));
    if (result.failure == upstream::Failure::Canceled || req.exchange.client_gone()) {
        pair.p_end = Pair::PEnd::ClientGone;
        co_return;
    }
    deps.metrics.leg_done(Leg::Prefill, seconds_since(leg_start));
    const unsigned status = result.ok() ? result.response.result_int() : 0;
    std::string reason;
    if (!result.ok()) {
        deps.metrics.upstream_error(Leg::Prefill, error_kind_for(result.failure));
        reason = upstream::describe(result.failure, result.ec);
        pair.p_errc = errc_for(result.failure);
        deps.registry.report_leg_failure(p, result.failure, reason);
        if (upstream::request_not_sent(result.failure) && may_retry) {
            pair.p_end = Pair::PEnd::NotSent;
        }
    } else if (status >= 500) {
        deps.metrics.upstream_error(Leg::Prefill, metrics::UpstreamErrorKind::Status5xx);
        reason = status_reason(status, result.response.body());
        pair.p_errc = Errc::UpstreamProtocol;
        deps.registry.report_error(p, reason);
    } else if (status >= 400) {
        // The request itself is bad: P's answer is the client's (D waits for KV in vain).
        deps.registry.report_success(p);
        deps.metrics.upstream_error(Leg::Prefill, metrics::UpstreamErrorKind::Status4xx);
        reason = status_reason(status, {});
        pair.p_end = Pair::PEnd::Answered4xx;
        pair.p_answer = std::move(result);
    } else {
        std::string mode;
        const PushAnswer a = check_push_answer(result.response.body(), mode);
        if (a == PushAnswer::NotJson) {
            deps.metrics.upstream_error(Leg::Prefill, metrics::UpstreamErrorKind::Protocol);
            reason = "sent an answer (HTTP " + std::to_string(status) +
                     ") that is not a JSON object within the JSON limits";
            pair.p_errc = Errc::UpstreamProtocol;
            deps.registry.report_error(p, reason);
        } else if (a == PushAnswer::WrongMode) {
            // A configuration error, not a broken instance: its health is left as it is.
            deps.metrics.kv_mode_mismatches.Increment();
            deps.metrics.upstream_error(Leg::Prefill, metrics::UpstreamErrorKind::Protocol);
            reason = "answered kv_transfer_params.transfer_mode " +
                     (mode == "missing" ? std::string("missing") : "\"" + mode + "\"") +
                     " where the router runs --kv-mode push: configure this prefill for push "
                     "(vLLM: kv_connector NixlPushConnector) or run the router in its mode";
            pair.p_errc = Errc::KvModeMismatch;
        } else {
            deps.registry.report_success(p);
            pair.p_end = Pair::PEnd::Ok;
            co_return;
        }
    }
    if (pair.p_end == Pair::PEnd::Pending) {
        pair.p_end = Pair::PEnd::Failed;
    }
    pair.p_reason = p.client_name() + " " + reason;
    if (pair.p_end != Pair::PEnd::NotSent) {
        log_failure(req, "prefill", p.name, reason);
    }
    prefill_failed(req, pair, p);
}

awaitable<void> decode_side(FlowDeps& deps, FlowRequest& req, Pair& pair, instances::Instance& d,
                            std::string body, bool may_retry) {
    using namespace net::experimental::awaitable_operators;
    EndsDecode ends{pair};
    const upstream::Timeouts timeouts{deps.cfg.connect_timeout, deps.cfg.decode_timeout,
                                      deps.cfg.decode_idle_timeout};
    upstream::PreparedRequest r = make_leg_request(http::verb::post, req.target, req.request_id,
                                                   req.headers, std::move(body), d.upstream_key);
    const Clock::time_point leg_start = Clock::now();
    auto leg = deps.client.open(d.endpoint, std::move(r), timeouts);
    auto stop = pair.p_failed.wait();
    auto either = std::move(leg) || std::move(stop);
    std::variant<upstream::Client::Opened, std::monostate> v = co_await std::move(either);
    if (v.index() == 1) {
        pair.d_end = Pair::DEnd::Cancelled;  // P failed while D waited for its answer's head
        co_return;
    }
    upstream::Client::Opened opened = std::move(std::get<0>(v));
    if (opened.failure == upstream::Failure::Canceled || req.exchange.client_gone()) {
        pair.d_end = Pair::DEnd::ClientGone;
        co_return;
    }
    if (opened.failure != upstream::Failure::None) {
        const upstream::Failure f = opened.failure;
        deps.metrics.upstream_error(Leg::Decode, error_kind_for(f));
        const std::string reason = upstream::describe(f, opened.ec);
        pair.d_reason = d.client_name() + ": " + reason;
        pair.d_errc = errc_for(f);
        deps.registry.report_leg_failure(d, f, reason);
        if (upstream::request_not_sent(f) && may_retry) {
            pair.d_end = Pair::DEnd::NotSent;
            co_return;
        }
        log_failure(req, "decode", d.name, reason);
        pair.d_end = Pair::DEnd::Failed;
        co_return;
    }
    if (pair.p_failed.raised()) {
        pair.d_end = Pair::DEnd::Cancelled;  // closed with the stream
        co_return;
    }
    pair.d_status = opened.stream->status();
    if (pair.d_status < 500) {
        deps.registry.report_success(d);
    }
    RelayEnd end = RelayEnd::Complete;
    {
        LegCanceler::Registration open = pair.canceler.add(*opened.stream);
        PairSink sink(pair);
        end = co_await relay_answer(deps, req, *opened.stream, d, &sink, nullptr);
    }
    deps.metrics.leg_done(Leg::Decode, seconds_since(leg_start));
    if (end == RelayEnd::Cancelled) {
        pair.d_end = Pair::DEnd::Cancelled;
    } else if (end == RelayEnd::ClientGone) {
        pair.d_end = Pair::DEnd::ClientGone;
        pair.disconnect_counted = true;  // by the relay
    } else {
        pair.d_end = Pair::DEnd::Relayed;
    }
}

// What a dispatch of the pair ended with: the client was answered (or is gone), or one side
// could not be reached and the pair goes out again with another instance on that side.
struct PairEnd {
    enum class Kind { Done, RetryPrefill, RetryDecode } kind = Kind::Done;
    std::string reason;
};

// The client gets P's error: a whole answer, or (D's stream head already went out) one error
// event and the end of the connection.
awaitable<void> answer_prefill_error(FlowRequest& req, Pair& pair) {
    if (pair.p_end == Pair::PEnd::Answered4xx && !req.exchange.responded()) {
        upstream::Result& a = pair.p_answer;
        co_await respond_relayed(
            req.exchange, a.response.result_int(), a.response[http::field::content_type],
            std::move(a.response.body()), a.response[http::field::retry_after]);
        co_return;
    }
    const Errc errc = pair.p_end == Pair::PEnd::Answered4xx ? Errc::UpstreamProtocol : pair.p_errc;
    const std::string message = "prefill instance " + pair.p_reason;
    if (!req.exchange.responded()) {
        co_await respond_error(req.exchange, errc, message);
        co_return;
    }
    const std::string event = openai_error_event(errc, message);
    co_await req.exchange.write_chunk(event);
    req.exchange.abort();
}

awaitable<PairEnd> run_pair(FlowDeps& deps, FlowRequest& req, instances::Instance& p,
                            instances::Instance& d, bool p_may_retry, bool d_may_retry) {
    using namespace net::experimental::awaitable_operators;
    const std::string transfer_id = new_transfer_id();
    const config::PushCoords& coords = p.kv.push;
    const std::string& kv_host = coords.kv_host.empty() ? p.endpoint.host : coords.kv_host;
    std::string control;
    if (deps.control != nullptr) {
        control = deps.control->descriptor_base64();
    }
    std::string p_body = make_prefill_body(req.body, prefill_kv_request(transfer_id, control));
    std::string d_body = make_decode_body(
        req.raw_body, push_decode_params(coords, kv_host, req.request_id, transfer_id));
    PDR_DEBUG(kLogComponent,
              "push: prefill " + p.name + " (engine " + coords.engine_id + ") and decode " +
                  d.name + " at once, transfer_id " + transfer_id,
              req.request_id);
    const net::any_io_executor here = co_await net::this_coro::executor;
    Pair pair(here);
    // Whatever ends the request without D taking the KV, P is told to drop the transfer.
    AbortGuard abort_unless_taken(deps.control, pair.kv_taken, p.endpoint, req.request_id,
                                  transfer_id);
    // With the transfer agent, P's copy of the write's Failed note ends D's wait at once.
    std::optional<kv::ControlAgent::Watch> watch;
    if (deps.control != nullptr) {
        watch.emplace(deps.control->watch(transfer_id, here, [&](const kv::TransferEnd& e) {
            if (e.ok || (pair.p_end != Pair::PEnd::Pending && pair.p_end != Pair::PEnd::Ok)) {
                return;
            }
            pair.p_end = Pair::PEnd::Failed;
            pair.p_errc = Errc::UpstreamProtocol;
            pair.p_reason = p.client_name() + " reported that the KV transfer failed: " + e.error;
            log_failure(req, "prefill", p.name, pair.p_reason);
            prefill_failed(req, pair, p);
        }));
    }
    auto p_side = prefill_side(deps, req, pair, p, std::move(p_body), p_may_retry);
    auto d_side = decode_side(deps, req, pair, d, std::move(d_body), d_may_retry);
    auto both = std::move(p_side) && std::move(d_side);
    co_await std::move(both);

    using PEnd = Pair::PEnd;
    using DEnd = Pair::DEnd;
    if (req.exchange.client_gone() || pair.p_end == PEnd::ClientGone ||
        pair.d_end == DEnd::ClientGone) {
        if (!pair.disconnect_counted) {
            deps.metrics.client_disconnect(pair.p_end == PEnd::Ok
                                               ? metrics::DisconnectPhase::Handover
                                               : metrics::DisconnectPhase::Prefill);
        }
        co_return PairEnd{};
    }
    if (pair.d_end == DEnd::Relayed) {
        co_return PairEnd{};  // the client has D's answer
    }
    if (pair.p_end == PEnd::NotSent) {
        abort_unless_taken.disarm();  // P never got the request
        co_return PairEnd{PairEnd::Kind::RetryPrefill, pair.p_reason};
    }
    if (pair.p_end == PEnd::Failed || pair.p_end == PEnd::Answered4xx) {
        co_await answer_prefill_error(req, pair);
        co_return PairEnd{};
    }
    if (pair.d_end == DEnd::NotSent) {
        co_return PairEnd{PairEnd::Kind::RetryDecode, pair.d_reason};
    }
    if (pair.d_end == DEnd::Failed) {
        co_await respond_error(req.exchange, pair.d_errc, "decode instance " + pair.d_reason);
        co_return PairEnd{};
    }
    // Not reached: D's leg is cancelled only after P failed.
    log_failure(req, "decode", d.name, "decode leg ended without an answer");
    if (!req.exchange.responded()) {
        co_await respond_error(req.exchange, Errc::Internal, "decode leg ended without an answer");
    } else {
        req.exchange.abort();
    }
    co_return PairEnd{};
}

}  // namespace

bool has_push_coords(const instances::Instance& p) {
    return !p.kv.push.empty();
}

awaitable<void> run_push_flow(FlowDeps& deps, FlowRequest& req) {
    deps.metrics.flow_started(metrics::FlowMode::Push);
    // Both roles must be up before either does any work; a P is usable only with its engine id.
    if (deps.registry.count_usable(Role::Prefill, has_push_coords) == 0) {
        if (deps.registry.count(Role::Prefill, true) == 0) {
            co_await respond_no_instance(deps, req, Leg::Prefill);
            co_return;
        }
        deps.metrics.upstream_error(Leg::Prefill, metrics::UpstreamErrorKind::NoInstance);
        const std::string why =
            "no prefill instance has push-mode KV coordinates (--prefill-engine-ids, or "
            "engine_id in /instances/add); see GET /instances";
        log_failure(req, "prefill", {}, why);
        co_await respond_error(req.exchange, Errc::NoPrefillInstance, why);
        co_return;
    }
    if (deps.registry.count(Role::Decode, true) == 0) {
        co_await respond_no_instance(deps, req, Leg::Decode);
        co_return;
    }
    InstanceAttempts p_tries(deps.registry, Role::Prefill, deps.cfg.prefill_retries,
                             req.prefill_hint, has_push_coords);
    InstanceAttempts d_tries(deps.registry, Role::Decode, deps.cfg.decode_retries);
    instances::InstancePtr p = p_tries.next();
    instances::InstancePtr d = d_tries.next();
    for (;;) {
        if (!p) {
            co_await respond_prefill_attempts_used(deps, req, p_tries, Errc::UpstreamConnect);
            co_return;
        }
        if (!d) {
            if (d_tries.tried() == 0) {
                co_await respond_no_instance(deps, req, Leg::Decode);
                co_return;
            }
            log_failure(req, "decode", d_tries.last_failed(),
                        "no other healthy decode instance to retry on (last try: " +
                            d_tries.last_error() + ")");
            co_await respond_error(req.exchange, Errc::UpstreamConnect,
                                   "could not reach a decode instance: " + d_tries.last_error());
            co_return;
        }
        const PairEnd end = co_await run_pair(deps, req, *p, *d, !p_tries.last(), !d_tries.last());
        if (end.kind == PairEnd::Kind::Done) {
            co_return;
        }
        // One side was not reached: the pair goes out again, under a new transfer id, with
        // another instance on that side (the other side's leg was cancelled).
        if (end.kind == PairEnd::Kind::RetryPrefill) {
            log_retry(req, "prefill", p->name, end.reason);
            p_tries.failed(end.reason);
            p = p_tries.next();
            if (p) {
                deps.metrics.retry(Leg::Prefill);
            }
        } else {
            log_retry(req, "decode", d->name, end.reason);
            d_tries.failed(end.reason);
            d = d_tries.next();
            if (d) {
                deps.metrics.retry(Leg::Decode);
            }
        }
    }
}

}  // namespace pdr::disagg
