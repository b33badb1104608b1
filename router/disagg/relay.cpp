#include "router/disagg/relay.hpp"

#include "router/common/log.hpp"

namespace pdr::disagg {

namespace {

using metrics::Leg;

std::string_view content_type_of(const upstream::ResponseStream& up) {
    auto it = up.head().find(http::field::content_type);
    return it == up.head().end() ? std::string_view{} : std::string_view(it->value());
}

void count_failure(FlowDeps& deps, FlowRequest& req, const instances::Instance& decode,
                   upstream::Failure f, bool mid_stream) {
    deps.metrics.upstream_error(Leg::Decode, error_kind_for(f));
    if (mid_stream) {
        deps.metrics.mid_stream_error(Leg::Decode);
    }
    std::string reason(mid_stream ? "mid-stream " : "");
    reason.append(upstream::to_string(f));
    log_failure(req.request_id, "decode", decode.name, reason);
}

// Whole answers (errors, non-stream completions): read everything, answer once.
awaitable<RelayEnd> relay_whole(FlowDeps& deps, FlowRequest& req, upstream::ResponseStream& up,
                                const instances::Instance& decode, FirstByteHook on_first_byte) {
    std::string body;
    upstream::Failure f = co_await up.read_some(body);
    if (f == upstream::Failure::None) {
        on_first_byte();
        if (!up.done()) {
            f = co_await up.read_all(body);
        }
    }
    if (f == upstream::Failure::Canceled || req.exchange.client_gone()) {
        deps.metrics.client_disconnect(metrics::DisconnectPhase::Decode);
        co_return RelayEnd::ClientGone;
    }
    if (f != upstream::Failure::None) {
        count_failure(deps, req, decode, f, false);
        co_await respond_error(
            req.exchange, errc_for(f),
            std::string("decode instance failed while answering: ").append(upstream::to_string(f)));
        co_return RelayEnd::UpstreamFailed;
    }
    unsigned status = up.status();
    if (status >= 400) {
        deps.metrics.upstream_error(Leg::Decode, status >= 500
                                                     ? metrics::UpstreamErrorKind::Status5xx
                                                     : metrics::UpstreamErrorKind::Status4xx);
        log_failure(req.request_id, "decode", decode.name,
                    std::string("status ").append(std::to_string(status)));
    }
    co_await respond_relayed(req.exchange, status, content_type_of(up), std::move(body));
    co_return RelayEnd::Complete;
}

// True when `tail`, the last bytes relayed, is empty or ends with a blank line (an SSE event
// boundary, with LF, CRLF or CR line ends). A rarer mix of line ends counts as inside an event:
// the blank lines then added are harmless (a blank line with no data dispatches nothing).
bool ends_an_event(std::string_view tail) {
    return tail.empty() || tail.ends_with("\n\n") || tail.ends_with("\r\r") ||
           tail.ends_with("\r\n\r\n");
}

void keep_tail(std::string& tail, std::string_view piece) {
    constexpr std::size_t kKeep = 4;
    if (piece.size() >= kKeep) {
        tail.assign(piece.substr(piece.size() - kKeep));
        return;
    }
    tail.append(piece);
    if (tail.size() > kKeep) {
        tail.erase(0, tail.size() - kKeep);
    }
}

awaitable<RelayEnd> relay_stream(FlowDeps& deps, FlowRequest& req, upstream::ResponseStream& up,
                                 const instances::Instance& decode, FirstByteHook on_first_byte) {
    server::Exchange& ex = req.exchange;
    http::response<http::empty_body> head{static_cast<http::status>(up.status()),
                                          ex.request().version()};
    std::string_view ct = content_type_of(up);
    head.set(http::field::content_type, ct.empty() ? std::string_view("text/event-stream") : ct);
    head.set(http::field::cache_control, "no-cache");
    if (auto ec = co_await ex.begin_stream(std::move(head)); ec) {
        deps.metrics.client_disconnect(metrics::DisconnectPhase::Decode);
        co_return RelayEnd::ClientGone;
    }
    std::string piece;
    bool first = true;
    // The last bytes relayed (up to 4), to tell whether the stream stopped inside an event.
    std::string tail;
    for (;;) {
        piece.clear();
        upstream::Failure f = co_await up.read_some(piece);
        if (f == upstream::Failure::Canceled || ex.client_gone()) {
            deps.metrics.client_disconnect(metrics::DisconnectPhase::Decode);
            co_return RelayEnd::ClientGone;
        }
        if (f != upstream::Failure::None) {
            count_failure(deps, req, decode, f, true);
            std::string event = openai_error_event(
                errc_for(f),
                std::string("decode instance failed mid-stream: ").append(upstream::to_string(f)));
            if (!ends_an_event(tail)) {
                // The decode stopped inside an event: end it, so the error event stands alone
                // instead of being glued onto a half line.
                event.insert(0, "\n\n");
            }
            co_await ex.write_chunk(event);
            ex.abort();
            co_return RelayEnd::UpstreamFailed;
        }
        if (!piece.empty()) {
            if (first) {
                first = false;
                on_first_byte();
                deps.metrics.first_byte(req.route, seconds_since(req.started));
            }
            keep_tail(tail, piece);
            error_code ec;
            if (auto rest = ex.write_chunk_or_rest(piece, ec)) {
                ec = co_await std::move(*rest);
            }
            if (ec) {
                up.cancel();
                deps.metrics.client_disconnect(metrics::DisconnectPhase::Decode);
                co_return RelayEnd::ClientGone;
            }
        }
        if (up.done()) {
            break;
        }
    }
    if (first) {
        on_first_byte();
    }
    co_await ex.end_stream();
    co_return RelayEnd::Complete;
}

}  // namespace

awaitable<RelayEnd> relay_answer(FlowDeps& deps, FlowRequest& req, upstream::ResponseStream& up,
                                 const instances::Instance& decode, FirstByteHook on_first_byte) {
    if (req.stream && up.status() < 300) {
        co_return co_await relay_stream(deps, req, up, decode, on_first_byte);
    }
    co_return co_await relay_whole(deps, req, up, decode, on_first_byte);
}

}  // namespace pdr::disagg
