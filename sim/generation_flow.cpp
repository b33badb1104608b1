// Completions and chat for both roles: faults, the prefill leg (one token + KV handle), the
// decode leg (read the KV named by the handle, then generate), streaming and non-stream answers.
#include "net/common/json_limits.hpp"
#include "net/common/log.hpp"
#include "net/common/uuid.hpp"
#include "sim/generation.hpp"
#include "sim/sim_impl.hpp"

#include <functional>

namespace pdr::sim {

using nlohmann::json;

namespace {

constexpr std::string_view kInvalid = "invalid_request_error";
constexpr std::string_view kServer = "server_error";

// Per-request bookkeeping. A client that goes away cancels the request's coroutine (the
// server's one signal): a delay it is in ends at once, and the request ends.
struct RequestCtx {
    explicit RequestCtx(net::any_io_executor ex) : timer(std::move(ex)) {}
    Timer timer;               // delays
    bool self_closed = false;  // we closed the connection on purpose (fault)
    bool finished = false;     // the whole answer was sent
};

// Counts the request as a client disconnect when it ends with its client gone (not closed by
// pdsim itself, and not after the whole answer was sent).
struct DisconnectCount {
    Counters& c;
    server::Exchange& x;
    const RequestCtx& ctx;
    ~DisconnectCount() {
        if (x.client_gone() && !ctx.self_closed && !ctx.finished) {
            ++c.client_disconnects;
        }
    }
};

struct InFlightGuard {
    Counters& c;
    std::uint64_t blocks = 0;
    ~InFlightGuard() {
        --c.in_flight;
        c.decode_blocks_in_use -= blocks;
    }
};

// Waits `d`. False when the client went away meanwhile.
awaitable<bool> pause(RequestCtx& ctx, server::Exchange& x, Duration d) {
    if (d.count() > 0 && !x.client_gone()) {
        ctx.timer.expires_after(d);
        auto [ec] = co_await ctx.timer.async_wait();
        (void)ec;
    }
    co_return !x.client_gone();
}

int blocks_for(int tokens, int block_size) {
    return (tokens + block_size - 1) / block_size;
}

std::string request_id_of(const server::Request& req) {
    auto it = req.find("X-Request-Id");
    return it == req.end() ? std::string() : std::string(it->value());
}

// The answer names the request it answers, as vLLM does with --enable-request-id-headers (the
// router checks it: an answer to another request on a reused connection is refused).
template <class Message>
void echo_request_id(const server::Request& req, Message& res) {
    if (auto it = req.find("X-Request-Id"); it != req.end()) {
        res.set("X-Request-Id", it->value());
    }
}

struct StreamWriter {
    server::Exchange& x;
    RequestCtx& ctx;
    int close_after;          // < 0: never
    bool cut_last;            // the event that reaches close_after goes out only half
    Duration split_first{0};  // > 0: the first event goes out in two halves this far apart
    int sent = 0;

    void close() {
        ctx.self_closed = true;
        x.abort();
    }
    // Sends one SSE event; false when the stream ended (client gone or injected close).
    awaitable<bool> emit(std::string_view event) {
        if (cut_last && close_after >= 0 && sent + 1 >= close_after) {
            co_await x.write_chunk(event.substr(0, event.size() / 2));
            close();
            co_return false;
        }
        if (sent == 0 && split_first.count() > 0) {
            // The first half goes with the held head; the rest after a pause.
            const std::size_t half = event.size() / 2;
            auto ec = co_await x.write_chunk(event.substr(0, half));
            if (ec) {
                co_return false;
            }
            const bool still_there = co_await pause(ctx, x, split_first);
            if (!still_there) {
                co_return false;
            }
            event.remove_prefix(half);
        }
        auto ec = co_await x.write_chunk(event);
        if (ec) {
            co_return false;
        }
        ++sent;
        if (close_after >= 0 && sent >= close_after) {
            close();
            co_return false;
        }
        co_return true;
    }
};

struct AnswerPlan {
    Duration token_delay{0};
    int close_after_chunks = -1;
    bool cut_last_event = false;
    bool close_delimited = false;   // a stream's body is ended by the close, not chunked
    Duration split_first_event{0};  // see Fault::split_first_event_ms
    // Adds fields to a non-stream answer, or to a stream's last token chunk, before it is sent.
    std::function<void(json&)> finalize;
};

awaitable<void> answer(SimServer::Impl& im, server::Exchange& x, RequestCtx& ctx,
                       const GenerationRequest& g, const AnswerPlan& plan) {
    const int n = g.max_tokens;
    AnswerMeta meta = make_answer_meta(g.api, g.model.empty() ? im.cfg.model : g.model);
    const unsigned version = x.request().version();
    if (!g.stream) {
        if (!co_await pause(ctx, x, plan.token_delay * n)) {
            co_return;
        }
        json body = full_answer(meta, generate_text(g.prompt_ids, n), g.prompt_tokens, n);
        if (plan.finalize) {
            plan.finalize(body);
        }
        if (plan.close_after_chunks >= 0) {
            http::response<http::empty_body> head{http::status::ok, version};
            head.set(http::field::content_type, "application/json");
            co_await x.begin_stream(std::move(head));
            ctx.self_closed = true;
            x.abort();
            co_return;
        }
        server::Response res{http::status::ok, version};
        res.set(http::field::content_type, "application/json");
        echo_request_id(x.request(), res);
        res.body() = dump_json(body);
        auto ec = co_await x.respond(std::move(res));
        if (!ec) {
            ctx.finished = true;
            ++im.state.counters.completed;
            im.state.counters.prompt_tokens += static_cast<std::uint64_t>(g.prompt_tokens);
            im.state.counters.generation_tokens += static_cast<std::uint64_t>(n);
        }
        co_return;
    }

    http::response<http::empty_body> head{http::status::ok, version};
    head.set(http::field::content_type, "text/event-stream");
    head.set(http::field::cache_control, "no-cache");
    echo_request_id(x.request(), head);
    if (plan.close_delimited) {
        head.version(10);  // the server sends an HTTP/1.0 body: unframed, ended by the close
    }
    // With a split first event, the head is held and leaves with the first half of that event.
    // (No co_await on a conditional expression: GCC 12 frees its awaitable's frame too early.)
    error_code begun;
    if (plan.split_first_event.count() > 0) {
        begun = co_await x.begin_stream_held(std::move(head));
    } else {
        begun = co_await x.begin_stream(std::move(head));
    }
    if (begun) {
        co_return;
    }
    StreamWriter w{x, ctx, plan.close_after_chunks, plan.cut_last_event, plan.split_first_event};
    if (w.close_after == 0) {
        w.close();
        co_return;
    }
    if (g.api == Api::Chat) {
        const std::string ev = sse_event(role_chunk(meta));
        if (!co_await w.emit(ev)) {
            co_return;
        }
    }
    TokenStream gen(g.prompt_ids);
    for (int i = 0; i < n; ++i) {
        if (!co_await pause(ctx, x, plan.token_delay)) {
            co_return;
        }
        json chunk = token_chunk(meta, id_text(gen.next()), i + 1 == n);
        if (i + 1 == n && plan.finalize) {
            plan.finalize(chunk);
        }
        const std::string ev = sse_event(chunk);
        if (!co_await w.emit(ev)) {
            co_return;
        }
    }
    if (g.include_usage) {
        const std::string ev = sse_event(usage_chunk(meta, g.prompt_tokens, n));
        if (!co_await w.emit(ev)) {
            co_return;
        }
    }
    if (!co_await w.emit(kDoneEvent)) {
        co_return;
    }
    if (!co_await x.end_stream()) {
        ctx.finished = true;
        ++im.state.counters.completed;
        im.state.counters.prompt_tokens += static_cast<std::uint64_t>(g.prompt_tokens);
        im.state.counters.generation_tokens += static_cast<std::uint64_t>(n);
    }
}

// LMCache mode's prefill leg: one token, KV moved to the decode and "KV ready" notifications
// (per the fault plan: before or after the KV, or after the answer), first_tok in the answer.
awaitable<void> lmcache_prefill(SimServer::Impl& im, server::Exchange& x, RequestCtx& ctx,
                                GenerationRequest g, LmcacheFault f, AnswerPlan plan) {
    const std::string rid = request_id_of(x.request());
    for (auto& v : check_lmcache_prefill_request(g.body, rid)) {
        PDR_WARN("pdsim", v, rid);
        im.state.add_violation(std::move(v));
    }
    LmcacheParams params;
    if (auto bad = parse_lmcache_params(*g.kv_params, params)) {
        im.state.add_violation("lmcache prefill request: " + *bad);
        co_await send_error(x, http::status::bad_request, *bad, kInvalid, "kv_transfer_params");
        co_return;
    }
    g.max_tokens = 1;  // a prefill engine computes the prompt and samples one token
    g.stream = false;
    const TokenId first = generate_ids(g.prompt_ids, 1).front();
    const bool fail_after = f.fail_after_notif;
    const std::string error = co_await im.lmcache_handover(params, g.prompt_ids, std::move(f));
    if (!error.empty()) {
        co_await send_error(x, http::status::internal_server_error, error, kServer);
        co_return;
    }
    if (fail_after && params.spec) {
        co_await send_error(x, http::status::internal_server_error,
                            "pdsim injected fault: prefill failed after sending KV-ready", kServer);
        co_return;
    }
    if (params.ret_first_tok) {
        plan.finalize = [first](json& body) {
            body["kv_transfer_params"] = {{"first_tok", first}};
        };
    }
    co_await answer(im, x, ctx, g, plan);
}

}  // namespace

awaitable<void> SimServer::Impl::handle_generation(server::Exchange& x, Api api) {
    auto self = shared_from_this();
    const auto& req = x.request();
    ++state.counters.requests;
    state.log_request(api == Api::Chat ? "/v1/chat/completions" : "/v1/completions",
                      headers_json(req), req.body());
    ++state.counters.in_flight;
    InFlightGuard guard{state.counters};
    auto ctx = std::make_shared<RequestCtx>(ex);
    TakenBlocks taken;  // a decode's blocks for the KV it receives, given back when it ends
    DisconnectCount disconnect_count{state.counters, x, *ctx};

    std::optional<Fault> fault = faults.take();
    if (fault) {
        ++state.counters.faults_applied;
    }
    GenerationRequest g;
    auto parse_error = parse_generation_request(api, req.body(), g);
    // Decode: the KV handle, looked at even when the rest of the body is bad, so that blocks a
    // rejected request names are released on the prefill.
    // Push mode's parameters (no block ids: D registers its own) are told apart from a handle.
    std::optional<KvHandle> handle;
    std::optional<PushParams> push;
    std::optional<std::string> handle_error;
    if (cfg.role == Role::Decode && cfg.kv_mode != KvMode::Lmcache && g.body.is_object()) {
        auto it = g.body.find("kv_transfer_params");
        if (it != g.body.end() && !it->is_null() && is_push_params(*it)) {
            PushParams pp;
            handle_error = parse_push_params(*it, pp);
            if (!handle_error) {
                push = std::move(pp);
            }
        } else if (it != g.body.end() && !it->is_null()) {
            KvHandle h;
            handle_error = parse_kv_handle(*it, h);
            if (!handle_error) {
                handle = std::move(h);
            }
        }
    }

    if (fault && fault->close_before_response) {
        ctx->self_closed = true;  // an engine that died: the prefill's lease frees the blocks
        x.abort();
        co_return;
    }
    if (fault && fault->delay_ms > 0) {
        if (!co_await pause(*ctx, x, Duration{fault->delay_ms})) {
            if (handle) {
                spawn_release(*handle);  // vLLM D frees P's blocks when its request is aborted
            }
            co_return;
        }
    }
    if (fault && fault->status != 0) {
        if (handle) {
            spawn_release(*handle);
        }
        server::Response res{static_cast<http::status>(fault->status), req.version()};
        res.set(http::field::content_type, "application/json");
        if (fault->retry_after_s >= 0) {
            res.set(http::field::retry_after, std::to_string(fault->retry_after_s));
        }
        res.body() = fault->body;
        co_await x.respond(std::move(res));
        co_return;
    }
    if (parse_error) {
        if (handle) {
            spawn_release(*handle);
        }
        co_await send_error(x, http::status::bad_request, parse_error->message, kInvalid,
                            parse_error->param);
        co_return;
    }

    if (cfg.role == Role::Prefill && cfg.prefill_delay > Duration{0}) {
        // The prompt's compute (--prefill-delay-ms), before any KV is held, written or sent.
        if (!co_await pause(*ctx, x, cfg.prefill_delay)) {
            co_return;
        }
    }
    AnswerPlan plan;
    plan.token_delay =
        fault && fault->token_delay_ms >= 0 ? Duration{fault->token_delay_ms} : cfg.token_delay;
    plan.close_after_chunks = fault ? fault->close_after_chunks : -1;
    plan.cut_last_event = fault && fault->cut_last_event;
    plan.close_delimited = fault && fault->close_delimited;
    plan.split_first_event = Duration{fault ? fault->split_first_event_ms : 0};

    if (cfg.role == Role::Prefill && cfg.kv_mode == KvMode::Lmcache && g.kv_params) {
        // (Not a conditional expression inside the co_await: GCC 12 frees its temporary early.)
        LmcacheFault lf;
        if (fault) {
            lf = fault->lmcache;
        }
        co_await lmcache_prefill(*this, x, *ctx, std::move(g), std::move(lf), std::move(plan));
        co_return;
    }
    if (cfg.role == Role::Prefill) {
        const bool leg = g.kv_params.has_value();
        std::string rid = request_id_of(req);
        if (leg) {
            for (auto& v : check_prefill_request(g.body, !rid.empty())) {
                PDR_WARN("pdsim", v, rid);
                state.add_violation(std::move(v));
            }
        }
        if (rid.empty()) {
            rid = make_uuid_v4();
        }
        g.max_tokens = 1;  // a prefill engine computes the prompt and samples one token
        if (leg) {
            g.stream = false;
        }
        if (leg && !(fault && fault->omit_kv_params)) {
            // The prompt's compute (one token's delay), then the blocks are held and filled:
            // a prefill whose client left meanwhile holds nothing.
            if (!co_await pause(*ctx, x, plan.token_delay)) {
                co_return;
            }
            plan.token_delay = Duration{0};
            json params = prefill_hold(rid, g.prompt_tokens, *g.kv_params, fault);
            if (params.is_null()) {
                const std::string msg =
                    "KV pool exhausted: the prompt needs " +
                    std::to_string(blocks_for(g.prompt_tokens, cfg.block_size_tokens)) +
                    " blocks, " + std::to_string(store.blocks_free()) + " of " +
                    std::to_string(store.capacity()) + " are free";
                PDR_WARN("pdsim", msg, rid);
                co_await send_error(x, http::status::service_unavailable, msg, kServer);
                co_return;
            }
            plan.finalize = [params = std::move(params)](json& body) {
                body["kv_transfer_params"] = params;
            };
        }
        co_await answer(*this, x, *ctx, g, plan);
        co_return;
    }

    // Decode role.
    if (cfg.kv_mode == KvMode::Lmcache) {
        if (g.kv_params) {
            state.add_violation("lmcache decode request: carries kv_transfer_params");
        }
        // A token-id prompt of two or more ids is the router's decode leg: tokens + [first_tok].
        // Its KV (all but the last token) must have arrived on every rank; it is never
        // recomputed. A text prompt is a direct request, served without KV.
        if (g.token_prompt && g.prompt_ids.size() >= 2) {
            if (auto missing = lmcache_claim(g.prompt_ids)) {
                PDR_WARN("pdsim", *missing, request_id_of(req));
                co_await send_error(x, http::status::internal_server_error, *missing, kServer);
                co_return;
            }
        } else {
            ++state.counters.local_prefills;
        }
    } else if (g.kv_params) {
        if (handle_error) {
            state.add_violation("decode request: " + *handle_error);
            co_await send_error(x, http::status::bad_request, *handle_error, kInvalid,
                                "kv_transfer_params");
            co_return;
        }
        if (cfg.decode_setup_delay > Duration{0}) {
            // D's own setup before the KV moves (--decode-setup-delay-ms): in push mode before
            // it registers with P, so it overlaps P's prefill; in pull mode after P's answer.
            if (!co_await pause(*ctx, x, cfg.decode_setup_delay)) {
                if (handle) {
                    spawn_release(*handle);
                }
                co_return;
            }
        }
        KvOutcome got;
        if (push && !agent) {
            got.status = http::status::internal_server_error;
            got.message = "push-mode KV needs a decode started with --kv-transfer pdx";
        } else if (push) {
            const int register_delay = fault ? fault->kv_register_delay_ms : 0;
            const int hold_after = fault ? fault->kv_hold_after_ms : 0;
            const int n = blocks_for(g.prompt_tokens, cfg.block_size_tokens);
            got = co_await push_receive(x, *push, n, register_delay, hold_after, taken);
        } else if (agent) {
            got = co_await pull_pdx(*handle, taken);
        } else {
            got = co_await pull_http(*handle);
        }
        if (got.cancelled || x.client_gone()) {
            if (handle) {
                spawn_release(*handle);  // the read may not have happened
            }
            co_return;
        }
        if (!got.ok()) {
            PDR_WARN("pdsim", got.message, request_id_of(req));
            co_await send_error(x, got.status, got.message, kServer);
            co_return;
        }
        ++state.counters.kv_reads;
    } else {
        ++state.counters.local_prefills;
    }
    guard.blocks = static_cast<std::uint64_t>(
        blocks_for(g.prompt_tokens + g.max_tokens, cfg.block_size_tokens));
    state.counters.decode_blocks_in_use += guard.blocks;
    if (cfg.answer_kv_params) {
        // What vLLM's D answers for multi-turn reuse: a handle to its own blocks.
        json ids = json::array();
        for (std::uint64_t b = 0; b < guard.blocks; ++b) {
            ids.push_back(b);
        }
        json params{{"do_remote_prefill", true},
                    {"do_remote_decode", false},
                    {"remote_engine_id", cfg.engine_id},
                    {"remote_block_ids", std::move(ids)},
                    {"remote_host", cfg.kv_host.empty() ? cfg.host : cfg.kv_host},
                    {"remote_port", cfg.port}};
        plan.finalize = [params = std::move(params)](json& body) {
            body["kv_transfer_params"] = params;
        };
    }
    co_await answer(*this, x, *ctx, g, plan);
}

}  // namespace pdr::sim
