#include "router/disagg/relay.hpp"

#include "net/common/fields.hpp"
#include "net/common/log.hpp"
#include "net/common/sse_cut.hpp"
#include "router/disagg/rewrite.hpp"

#include <algorithm>

namespace pdr::disagg {

namespace {

using metrics::Leg;

std::string_view header_of(const upstream::ResponseStream& up, http::field f) {
    return wire::field_value(up.head(), f);
}

std::string_view content_type_of(const upstream::ResponseStream& up) {
    return header_of(up, http::field::content_type);
}

void count_failure(FlowDeps& deps, FlowRequest& req, const instances::Instance& decode,
                   upstream::Failure f, bool mid_stream) {
    deps.metrics.upstream_error(Leg::Decode, error_kind_for(f));
    if (mid_stream) {
        deps.metrics.mid_stream_error(Leg::Decode);
    }
    std::string reason(mid_stream ? "mid-stream " : "");
    reason.append(describe_failure(deps.cfg, f, {}));
    log_failure(req, "decode", decode.name, reason);
}

// Whole answers (errors, non-stream completions): read everything, answer once.
awaitable<RelayEnd> relay_whole(FlowDeps& deps, FlowRequest& req, upstream::ResponseStream& up,
                                const instances::Instance& decode, FirstByteSink* handover,
                                AnswerRewriter* rewriter) {
    std::string body;
    upstream::Failure f = co_await up.read_some(body);
    if (f == upstream::Failure::None) {
        if (handover != nullptr) {
            handover->first_byte();
        }
        if (!up.done()) {
            f = co_await up.read_all(body);
        }
    }
    if (f == upstream::Failure::None && body.size() > deps.cfg.max_upstream_body_bytes) {
        f = upstream::Failure::TooLarge;  // the first read alone was over the limit
    }
    if (f == upstream::Failure::Canceled && !req.exchange.client_gone()) {
        co_return RelayEnd::Cancelled;
    }
    if (f == upstream::Failure::Canceled || req.exchange.client_gone()) {
        deps.metrics.client_disconnect(metrics::DisconnectPhase::Decode);
        co_return RelayEnd::ClientGone;
    }
    if (f != upstream::Failure::None) {
        count_failure(deps, req, decode, f, false);
        const std::string why = f == upstream::Failure::TooLarge
                                    ? "decode instance " + decode.client_name() + " " +
                                          describe_failure(deps.cfg, f, {})
                                    : std::string("decode instance failed while answering: ")
                                          .append(upstream::to_string(f));
        co_await respond_error(req.exchange, errc_for(f), why);
        co_return RelayEnd::UpstreamFailed;
    }
    unsigned status = up.status();
    if (status >= 400) {
        deps.metrics.upstream_error(Leg::Decode, status >= 500
                                                     ? metrics::UpstreamErrorKind::Status5xx
                                                     : metrics::UpstreamErrorKind::Status4xx);
        log_failure(req, "decode", decode.name,
                    std::string("status ").append(std::to_string(status)));
    }
    std::string_view content_type = content_type_of(up);
    if (rewriter != nullptr && status < 300) {
        std::string shaped;
        if (!rewriter->whole(body, shaped)) {
            deps.metrics.upstream_error(Leg::Decode, metrics::UpstreamErrorKind::Protocol);
            log_failure(req, "decode", decode.name,
                        "answered something that is not a completion object");
            co_await respond_error(req.exchange, Errc::UpstreamProtocol,
                                   "decode instance " + decode.client_name() +
                                       " answered something that is not a completion object");
            co_return RelayEnd::UpstreamFailed;
        }
        body = std::move(shaped);
        content_type = "application/json";
    }
    if (status < 300 && !deps.cfg.expose_decode_kv_params && strip_kv_params(body)) {
        deps.metrics.decode_kv_params_removed.Increment();
    }
    if (status < 400 && !req.exchange.responded() && !req.exchange.client_gone()) {
        // the whole answer goes out now: its first byte is the client's first byte
        deps.metrics.first_byte(req.route, seconds_since(req.started));
    }
    co_await respond_relayed(req.exchange, status, content_type, std::move(body),
                             header_of(up, http::field::retry_after));
    co_return RelayEnd::Complete;
}

// True when the answer's body ends only with the connection (neither chunked nor with a length).
bool ended_by_close(const upstream::ResponseStream& up) {
    const auto& h = up.head();
    return wire::find_field(h, http::field::transfer_encoding) == nullptr &&
           wire::find_field(h, http::field::content_length) == nullptr;
}

// What the last event in `sent` (whole events, any line ends) is, from its data lines (each
// without "data:" and one space): D's own error event (a JSON object that starts with "error"),
// the OpenAI stream's end (`[DONE]`), or neither.
enum class LastEvent { Other, Error, Done };

LastEvent last_event(std::string_view sent) {
    std::size_t end = sent.size();
    while (end > 0 && (sent[end - 1] == '\n' || sent[end - 1] == '\r')) {
        --end;
    }
    const std::string_view body = sent.substr(0, end);
    const std::string_view event = body.substr(sse_events_end(body));
    // (Not find_first_of("\r\n") per line: libstdc++ looks each byte up in that set with a
    // memchr call, which was a fifth of a relayed stream's instructions.)
    SseLineEnds line_ends(event);
    for (std::size_t at = 0; at < event.size();) {
        const std::size_t eol = line_ends.next(at);
        std::string_view line = event.substr(at, eol - at);
        at = eol + 1;
        if (!line.starts_with("data:")) {
            continue;
        }
        line.remove_prefix(5);
        if (line.starts_with(' ')) {
            line.remove_prefix(1);
        }
        if (line.starts_with("{\"error\"")) {
            return LastEvent::Error;
        }
        if (line == "[DONE]") {
            return LastEvent::Done;
        }
    }
    return LastEvent::Other;
}

// A body that only its close ends (no chunking, no length) is whole only when its last event was
// [DONE]: a close after any other event is a decode that died between events (issue 19 #12).
// Chunked and sized bodies say themselves that they are complete.
bool ended_early(const upstream::ResponseStream& up, LastEvent last) {
    return ended_by_close(up) && last != LastEvent::Done;
}

// Where a relayed stream stands: one struct, named states.
struct StreamState {
    // The client's head: held to go out with the first events that came with D's head, or sent.
    enum class Head { Held, Sent } head = Head::Sent;
    bool first_byte_seen = false;  // D's first body byte has arrived (the handover is over)
    SseCutter cutter;  // whole events only: a failure never leaves a truncated one behind

    // The last whole event relayed: D's own error event (the client has been told; no second
    // error event), [DONE] (the client has the whole answer), or another. Read only when the
    // body ends or fails, so the piece it is in is kept (swapped in, not copied) and looked at
    // then, not after every write.
    LastEvent last() {
        if (last_pending_) {
            last_ = last_event(last_piece_);
            last_pending_ = false;
        }
        return last_;
    }
    // `piece` went out and ends at an event's end: its last event is the last one relayed.
    // Takes its bytes (leaves `piece` with other ones, to be cleared).
    void relayed_whole(std::string& piece) {
        last_piece_.swap(piece);
        last_pending_ = true;
    }
    // Part of an over-long event went out after the last whole one.
    void relayed_part() {
        last_pending_ = false;
        last_ = LastEvent::Other;
    }

private:
    LastEvent last_ = LastEvent::Other;
    bool last_pending_ = false;
    std::string last_piece_;
};

// Ends a started stream after a decode failure: drops the unfinished event the cutter holds,
// sends one error event after the last whole one (none when D's last event was its own error
// event: the client has been told), closes the client connection.
awaitable<void> end_with_error(FlowRequest& req, SseCutter& cutter,
                               const instances::Instance& decode, Errc errc, std::string message,
                               bool told) {
    if (told) {
        PDR_DEBUG(kLogComponent, decode.name + " sent its own error event before failing",
                  req.request_id);
        req.exchange.abort();
        co_return;
    }
    std::string event = openai_error_event(errc, message);
    if (cutter.held() > 0) {
        PDR_DEBUG(kLogComponent,
                  "dropped " + std::to_string(cutter.held()) +
                      " bytes of an unfinished event from " + decode.name,
                  req.request_id);
    }
    if (!cutter.at_boundary()) {
        // An over-long event was passed on before its end (over the cutter's cap), and D
        // stopped inside it. Any error event would have to end that event first and so deliver
        // it truncated, as if whole: the connection is cut instead, with the body unfinished,
        // and the client's SSE parser drops the unfinished event.
        PDR_WARN(kLogComponent,
                 decode.name + " stopped inside an event over " +
                     std::to_string(SseCutter::kDefaultMaxHeld / 1024) +
                     " KiB that was already being relayed; the client connection is cut without "
                     "an error event",
                 req.request_id);
        req.exchange.abort();
        co_return;
    }
    co_await req.exchange.write_chunk(event);
    req.exchange.abort();
}

awaitable<RelayEnd> relay_stream(FlowDeps& deps, FlowRequest& req, upstream::ResponseStream& up,
                                 const instances::Instance& decode, FirstByteSink* handover,
                                 AnswerRewriter* rewriter) {
    server::Exchange& ex = req.exchange;
    http::response<http::empty_body> head{static_cast<http::status>(up.status()),
                                          ex.request().version()};
    std::string_view ct = content_type_of(up);
    head.set(http::field::content_type, ct.empty() ? std::string_view("text/event-stream") : ct);
    head.set(http::field::cache_control, "no-cache");
    // D's first events usually came with its head: the client's head then goes out with them
    // in one write. A head that came alone is passed on at once.
    // (No co_await on a conditional expression: GCC 12 frees its awaitable's frame too early.)
    StreamState st;
    if (!deps.cfg.expose_decode_kv_params) {
        // Taking D's kv_transfer_params out of an event needs that event whole: it may be as big
        // as a KV handle.
        st.cutter.hold_whole_if("\"kv_transfer_params\"",
                                SseCutter::kDefaultMaxHeld + deps.cfg.max_kv_params_bytes);
    }
    st.head = up.body_buffered() ? StreamState::Head::Held : StreamState::Head::Sent;
    error_code begun;
    if (st.head == StreamState::Head::Held) {
        begun = co_await ex.begin_stream_held(std::move(head));
    } else {
        begun = co_await ex.begin_stream(std::move(head));
    }
    if (begun) {
        deps.metrics.client_disconnect(metrics::DisconnectPhase::Decode);
        co_return RelayEnd::ClientGone;
    }
    // A rewriter's first events go out with the head (held) or at once.
    std::string start = rewriter != nullptr ? rewriter->stream_start() : std::string();
    if (!start.empty() && st.head == StreamState::Head::Sent) {
        const error_code wrote = co_await ex.write_chunk(start);
        if (wrote) {
            up.cancel();
            deps.metrics.client_disconnect(metrics::DisconnectPhase::Decode);
            co_return RelayEnd::ClientGone;
        }
        start.clear();
    }
    std::string piece;
    std::string shaped;
    for (;;) {
        piece.clear();
        upstream::Failure f = co_await up.read_some(piece);
        if (f == upstream::Failure::Canceled && !ex.client_gone()) {
            co_return RelayEnd::Cancelled;  // the flow closed it: the flow tells the client
        }
        if (f == upstream::Failure::Canceled || ex.client_gone()) {
            deps.metrics.client_disconnect(metrics::DisconnectPhase::Decode);
            co_return RelayEnd::ClientGone;
        }
        if (f != upstream::Failure::None && st.cutter.held() == 0 && st.last() == LastEvent::Done) {
            // Only the end of the body failed: the answer is whole, so it ends cleanly (an
            // error event after [DONE] would contradict it). D's failure is still counted.
            deps.metrics.upstream_error(Leg::Decode, error_kind_for(f));
            PDR_WARN(kLogComponent,
                     decode.name + " failed after [DONE] (" + std::string(upstream::to_string(f)) +
                         "); the answer was whole, the stream is ended cleanly",
                     req.request_id);
            co_await ex.end_stream();
            co_return RelayEnd::Complete;
        }
        if (f != upstream::Failure::None) {
            count_failure(deps, req, decode, f, true);
            co_await end_with_error(
                req, st.cutter, decode, errc_for(f),
                std::string("decode instance failed mid-stream: ").append(upstream::to_string(f)),
                st.cutter.held() == 0 && st.last() == LastEvent::Error);
            co_return RelayEnd::UpstreamFailed;
        }
        if (!piece.empty() && !st.first_byte_seen) {
            st.first_byte_seen = true;
            if (handover != nullptr) {
                handover->first_byte();
            }
            deps.metrics.first_byte(req.route, seconds_since(req.started));
        }
        st.cutter.take(piece);
        // A body that only its close ends (no chunking, no length) cannot say whether it is
        // complete: a close inside an event is taken for a decode that died there.
        const bool cut_off = up.done() && st.cutter.held() > 0 && ended_by_close(up);
        if (up.done() && st.cutter.held() > 0 && !cut_off) {
            piece.append(st.cutter.flush());  // a last event without its blank line
        }
        if (rewriter != nullptr && !piece.empty()) {
            if (!st.cutter.at_boundary() || !rewriter->stream_events(piece, shaped)) {
                deps.metrics.upstream_error(Leg::Decode, metrics::UpstreamErrorKind::Protocol);
                deps.metrics.mid_stream_error(Leg::Decode);
                log_failure(req, "decode", decode.name,
                            "sent a stream event that is not a completion chunk");
                SseCutter clean;
                co_await end_with_error(req, clean, decode, Errc::UpstreamProtocol,
                                        "decode instance " + decode.client_name() +
                                            " sent a stream event that is not a completion chunk",
                                        false);
                co_return RelayEnd::UpstreamFailed;
            }
            piece.swap(shaped);
        }
        if (!deps.cfg.expose_decode_kv_params && st.cutter.at_boundary() &&
            strip_kv_params_events(piece)) {
            deps.metrics.decode_kv_params_removed.Increment();
        }
        if (!start.empty()) {
            piece.insert(0, start);
            start.clear();
        }
        // A held head goes out with this piece; when what came with D's head was only the start
        // of an event (nothing whole to pass on yet), it goes out alone now rather than wait
        // for the rest of that event.
        if (!piece.empty() || (st.head == StreamState::Head::Held && !up.done() && !cut_off)) {
            st.head = StreamState::Head::Sent;
            const bool whole = st.cutter.at_boundary() && !piece.empty();
            if (!whole && !piece.empty()) {
                st.relayed_part();  // part of a later (over-long) event went out after it
            }
            // The last piece and the end of the body go out in one write (unless the body ended
            // early: see below).
            const bool last =
                up.done() && !cut_off && !ended_early(up, whole ? last_event(piece) : st.last());
            error_code ec;
            std::optional<awaitable<error_code>> rest;
            if (last) {
                rest = ex.write_last_chunk_or_rest(piece, ec);
            } else {
                rest = ex.write_chunk_or_rest(piece, ec);
            }
            if (rest) {
                ec = co_await std::move(*rest);
            }
            if (ec) {
                up.cancel();
                deps.metrics.client_disconnect(metrics::DisconnectPhase::Decode);
                co_return RelayEnd::ClientGone;
            }
            if (last) {
                co_return RelayEnd::Complete;
            }
            if (whole) {
                st.relayed_whole(piece);
            }
        }
        if (cut_off) {
            count_failure(deps, req, decode, upstream::Failure::Read, true);
            co_await end_with_error(req, st.cutter, decode, Errc::UpstreamClosed,
                                    "decode instance closed the stream inside an event", false);
            co_return RelayEnd::UpstreamFailed;
        }
        if (up.done() && ended_early(up, st.last())) {
            count_failure(deps, req, decode, upstream::Failure::Read, true);
            co_await end_with_error(req, st.cutter, decode, Errc::UpstreamClosed,
                                    "decode instance closed the stream before [DONE]",
                                    st.last() == LastEvent::Error);
            co_return RelayEnd::UpstreamFailed;
        }
        if (up.done()) {
            break;
        }
    }
    if (!st.first_byte_seen && handover != nullptr) {
        handover->first_byte();
    }
    co_await ex.end_stream();
    co_return RelayEnd::Complete;
}

}  // namespace

awaitable<RelayEnd> relay_answer(FlowDeps& deps, FlowRequest& req, upstream::ResponseStream& up,
                                 const instances::Instance& decode, FirstByteSink* handover,
                                 AnswerRewriter* rewriter) {
    if (req.stream && up.status() < 300) {
        co_return co_await relay_stream(deps, req, up, decode, handover, rewriter);
    }
    co_return co_await relay_whole(deps, req, up, decode, handover, rewriter);
}

}  // namespace pdr::disagg
