#pragma once
// OpenAI/vLLM request parsing and response shapes for pdsim: completions and chat, whole
// answers and SSE chunks. Pure functions over nlohmann::json; no I/O.
#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace pdr::sim {

enum class Api { Completions, Chat };

struct GenerationRequest {
    Api api = Api::Completions;
    nlohmann::json body;  // the parsed request object
    std::string prompt;   // prompt text (chat: message contents joined by "\n"; token ids: the
                          // ids joined by spaces)
    std::vector<std::int64_t> prompt_ids;  // what generation starts from (text: tokenized)
    bool token_prompt = false;             // the prompt was given as a list of token ids
    int prompt_tokens = 1;                 // prompt_ids.size()
    int max_tokens = 16;                   // chat: max_completion_tokens wins over max_tokens
    bool stream = false;
    bool include_usage = false;  // stream_options.include_usage
    std::string model;           // the model named in the request (may be empty)
    // Top-level kv_transfer_params when present and not null (always an object then).
    std::optional<nlohmann::json> kv_params;
};

struct RequestError {
    std::string message;
    std::string param;  // the offending field, or empty
};

// Parses and validates a completions/chat body. On failure returns the error (OpenAI 400).
std::optional<RequestError> parse_generation_request(Api api, std::string_view body,
                                                     GenerationRequest& out);

// Everything an answer carries besides the text.
struct AnswerMeta {
    Api api = Api::Completions;
    std::string id;  // cmpl-<uuid> / chatcmpl-<uuid>
    std::int64_t created = 0;
    std::string model;
};
AnswerMeta make_answer_meta(Api api, std::string model);

// Non-stream answer: text_completion / chat.completion with usage and finish_reason "length".
nlohmann::json full_answer(const AnswerMeta& meta, std::string_view text, int prompt_tokens,
                           int completion_tokens);

// Streaming chunks.
nlohmann::json role_chunk(const AnswerMeta& meta);  // chat only: delta {role, content:""}
nlohmann::json token_chunk(const AnswerMeta& meta, std::string_view text, bool last);
nlohmann::json usage_chunk(const AnswerMeta& meta, int prompt_tokens, int completion_tokens);
// "data: <json>\n\n"
std::string sse_event(const nlohmann::json& chunk);
inline constexpr std::string_view kDoneEvent = "data: [DONE]\n\n";

// {"error": {"message", "type", "param", "code"}} with an arbitrary type and numeric code.
std::string error_body(std::string_view message, std::string_view type, int code,
                       std::string_view param = {});
// The default body of an injected fault with HTTP `status`.
std::string fault_error_body(int status);

}  // namespace pdr::sim
