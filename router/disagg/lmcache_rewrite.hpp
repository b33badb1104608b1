#pragma once
// Pure rewriting for the LMCache flow (PROTOCOLS.md §5): what the client asked, the /tokenize
// body, the prefill body with its disagg_spec, P's first token, the decode body (a completion on
// the prompt's token ids plus P's token), and the client's answer built from P's token and D's
// completion (chat answers converted to chat.completion / chat.completion.chunk). No I/O here.
#include "net/common/json_scan.hpp"
#include "router/disagg/relay.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace pdr::disagg::lmcache {

enum class Api { Completions, Chat };

// What the flow needs from the client's body.
struct ClientAsk {
    Api api = Api::Completions;
    bool stream = false;
    bool include_usage = false;              // stream_options.include_usage
    std::optional<std::int64_t> max_tokens;  // max_completion_tokens (chat) or max_tokens
    std::optional<std::int64_t> min_tokens;
    // The client sent token ids as its prompt: they are the tokens (no /tokenize).
    std::optional<std::vector<std::int64_t>> tokens;
    std::string prompt_text;  // completions with a text prompt: the prompt's JSON string text
};

// Checks that this mode can serve the request: one prompt (a string, a list of one string, a
// list of token ids, or a list of one such list), n 1, best_of 1, no echo. False + a message and
// the offending field otherwise (the client gets 400).
bool read_client_ask(const JsonObjectView& body, Api api, bool stream, ClientAsk& out,
                     std::string& error, std::string& param);

// POST {P}/tokenize: {"model", "prompt"} or {"model", "messages", and the chat template fields
// the client sent}.
std::string make_tokenize_body(const JsonObjectView& body, const ClientAsk& ask);

// P's /tokenize answer: {"tokens": [ids...], ...}. False + why when it is not.
bool parse_tokens(std::string_view answer, std::vector<std::int64_t>& out, std::string& error);

// Where P sends the KV: the chosen D's receiver.
struct DisaggSpec {
    std::string req_id;
    std::string receiver_host;
    std::vector<unsigned short> init_ports, alloc_ports;
};
// `ids` as a JSON array text.
std::string token_array(const std::vector<std::int64_t>& ids, const std::int64_t* extra = nullptr);

// The prefill body: a completion on the token ids, max_tokens 1, stream false, the client's
// sampling params, and kv_transfer_params {ret_first_tok, disagg_spec} (no disagg_spec when
// `spec` is null: P then moves no KV).
std::string make_prefill_body(const JsonObjectView& body, const std::vector<std::int64_t>& ids,
                              const DisaggSpec* spec);

// P's answer: kv_transfer_params.first_tok, and its choice's text and finish_reason.
struct FirstToken {
    std::int64_t id = 0;
    std::string text;
    std::string finish_reason;  // empty when null
    std::string model;
};
bool parse_first_token(std::string_view answer, FirstToken& out, std::string& error);

// The decode body: a completion on ids + [first], max_tokens reduced by one (absent if the
// client gave none), min_tokens reduced by one, the client's stream/stream_options and sampling
// params; no kv_transfer_params, no chat-only fields.
std::string make_decode_body(const JsonObjectView& body, const ClientAsk& ask,
                             const std::vector<std::int64_t>& ids, std::int64_t first);

// Builds the client's answer from P's first token and D's completion answer: the text starts
// with P's token, usage counts the prompt once and the completion tokens including P's, and a
// chat request gets chat objects with one id and `created` for the whole stream.
class AnswerShaper final : public AnswerRewriter {
public:
    AnswerShaper(const ClientAsk& ask, std::string_view request_id, FirstToken first,
                 std::int64_t prompt_tokens, std::int64_t created);

    bool whole(std::string_view d_answer, std::string& out) override;
    std::string stream_start() override;
    bool stream_events(std::string_view events, std::string& out) override;

    // P's token is the whole answer (max_tokens 1, or P stopped): the body, or the events
    // through [DONE].
    std::string first_only_whole() const;
    std::string first_only_stream();

private:
    std::string chunk(std::string_view text, std::string_view finish_reason, bool role) const;

    Api api_;
    bool include_usage_;
    std::string id_;
    FirstToken first_;
    std::int64_t prompt_tokens_;
    std::int64_t created_;
};

}  // namespace pdr::disagg::lmcache
