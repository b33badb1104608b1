#include "sim/openai.hpp"
#include "net/common/json_limits.hpp"

#include "net/common/sse_cut.hpp"
#include "net/common/uuid.hpp"
#include "sim/generation.hpp"

#include <chrono>

namespace pdr::sim {

namespace {

using nlohmann::json;

std::optional<RequestError> fail(std::string message, std::string param = {}) {
    return RequestError{std::move(message), std::move(param)};
}

// Reads an optional positive integer field; `present` tells whether it was set (not null).
std::optional<RequestError> read_token_limit(const json& body, const char* name, int& value,
                                             bool& present) {
    present = false;
    auto it = body.find(name);
    if (it == body.end() || it->is_null()) {
        return std::nullopt;
    }
    if (!it->is_number_integer() && !it->is_number_unsigned()) {
        return fail(std::string("'") + name + "' must be an integer", name);
    }
    auto v = it->get<std::int64_t>();
    if (v < 1) {
        return fail(std::string("'") + name + "' must be at least 1, got " + std::to_string(v),
                    name);
    }
    if (v > kMaxModelLen) {
        v = kMaxModelLen + 1;  // reported by the context-length check below
    }
    value = static_cast<int>(v);
    present = true;
    return std::nullopt;
}

std::optional<RequestError> read_prompt(const json& body, GenerationRequest& out) {
    auto it = body.find("prompt");
    if (it == body.end() || it->is_null()) {
        return fail("'prompt' is required", "prompt");
    }
    const json* p = &*it;
    if (p->is_array() && p->size() == 1 && ((*p)[0].is_string() || (*p)[0].is_array())) {
        p = &(*p)[0];  // a batch of one prompt
    }
    if (p->is_string()) {
        out.prompt = p->get<std::string>();
        out.prompt_ids = tokenize(out.prompt);
        out.prompt_tokens = static_cast<int>(out.prompt_ids.size());
        return std::nullopt;
    }
    if (p->is_array() && !p->empty()) {
        std::string text;
        for (const auto& t : *p) {
            if (!t.is_number_integer() && !t.is_number_unsigned()) {
                return fail("'prompt' must be a string or a list of token ids", "prompt");
            }
            const auto id = t.get<std::int64_t>();
            const bool in_vocab =
                t.is_number_unsigned()
                    ? t.get<std::uint64_t>() <= static_cast<std::uint64_t>(kMaxTokenId)
                    : id >= 0 && id <= kMaxTokenId;
            if (!in_vocab) {
                return fail("token id " + t.dump() + " in 'prompt' is out of vocabulary (0-" +
                                std::to_string(kMaxTokenId) + ")",
                            "prompt");
            }
            if (!text.empty()) {
                text.push_back(' ');
            }
            text += std::to_string(id);
            out.prompt_ids.push_back(id);
        }
        out.prompt = std::move(text);
        out.token_prompt = true;
        out.prompt_tokens = static_cast<int>(out.prompt_ids.size());
        return std::nullopt;
    }
    return fail("'prompt' must be a string, a list of token ids, or a list of one of those",
                "prompt");
}

json usage_json(int prompt_tokens, int completion_tokens) {
    return json{{"prompt_tokens", prompt_tokens},
                {"total_tokens", prompt_tokens + completion_tokens},
                {"completion_tokens", completion_tokens},
                {"prompt_tokens_details", nullptr}};
}

json chunk_base(const AnswerMeta& meta) {
    return json{{"id", meta.id},
                {"object", meta.api == Api::Chat ? "chat.completion.chunk" : "text_completion"},
                {"created", meta.created},
                {"model", meta.model}};
}

}  // namespace

std::optional<RequestError> parse_generation_request(Api api, std::string_view body,
                                                     GenerationRequest& out) {
    out = GenerationRequest{};
    out.api = api;
    out.body = parse_untrusted_json(body);
    if (out.body.is_discarded()) {
        return fail("request body is not valid JSON");
    }
    if (!out.body.is_object()) {
        return fail("request body must be a JSON object");
    }
    const json& b = out.body;
    if (auto it = b.find("model"); it != b.end() && !it->is_null()) {
        if (!it->is_string()) {
            return fail("'model' must be a string", "model");
        }
        out.model = it->get<std::string>();
    }
    if (api == Api::Chat) {
        auto it = b.find("messages");
        if (it == b.end()) {
            return fail("'messages' is required", "messages");
        }
        std::string error;
        if (!chat_prompt(*it, out.prompt, error)) {
            return fail(error, "messages");
        }
        out.prompt_ids = tokenize(out.prompt);
        out.prompt_tokens = static_cast<int>(out.prompt_ids.size());
    } else if (auto e = read_prompt(b, out)) {
        return e;
    }

    bool has_max = false;
    int max_tokens = kDefaultMaxTokens;
    if (auto e = read_token_limit(b, "max_tokens", max_tokens, has_max)) {
        return e;
    }
    if (api == Api::Chat) {
        bool has_mct = false;
        int mct = kDefaultMaxTokens;
        if (auto e = read_token_limit(b, "max_completion_tokens", mct, has_mct)) {
            return e;
        }
        if (has_mct) {
            max_tokens = mct;
        }
    }
    out.max_tokens = max_tokens;
    if (out.prompt_tokens + out.max_tokens > kMaxModelLen) {
        return fail("This model's maximum context length is " + std::to_string(kMaxModelLen) +
                        " tokens. However, you requested " +
                        std::to_string(out.prompt_tokens + out.max_tokens) + " tokens (" +
                        std::to_string(out.prompt_tokens) + " in the messages, " +
                        std::to_string(out.max_tokens) +
                        " in the completion). Please reduce the length.",
                    "max_tokens");
    }

    if (auto it = b.find("stream"); it != b.end() && !it->is_null()) {
        if (!it->is_boolean()) {
            return fail("'stream' must be a boolean", "stream");
        }
        out.stream = it->get<bool>();
    }
    if (auto it = b.find("stream_options"); it != b.end() && !it->is_null()) {
        if (!it->is_object()) {
            return fail("'stream_options' must be an object", "stream_options");
        }
        if (auto iu = it->find("include_usage"); iu != it->end() && !iu->is_null()) {
            if (!iu->is_boolean()) {
                return fail("'stream_options.include_usage' must be a boolean", "stream_options");
            }
            out.include_usage = iu->get<bool>();
        }
    }
    if (auto it = b.find("kv_transfer_params"); it != b.end() && !it->is_null()) {
        if (!it->is_object()) {
            return fail("'kv_transfer_params' must be an object", "kv_transfer_params");
        }
        out.kv_params = *it;
    }
    return std::nullopt;
}

AnswerMeta make_answer_meta(Api api, std::string model) {
    AnswerMeta m;
    m.api = api;
    m.id = (api == Api::Chat ? "chatcmpl-" : "cmpl-") + make_uuid_v4();
    m.created = std::chrono::duration_cast<std::chrono::seconds>(
                    std::chrono::system_clock::now().time_since_epoch())
                    .count();
    m.model = std::move(model);
    return m;
}

json full_answer(const AnswerMeta& meta, std::string_view text, int prompt_tokens,
                 int completion_tokens) {
    json choice;
    if (meta.api == Api::Chat) {
        choice = json{
            {"index", 0},
            {"message", {{"role", "assistant"}, {"content", text}, {"tool_calls", json::array()}}},
            {"logprobs", nullptr},
            {"finish_reason", "length"},
            {"stop_reason", nullptr}};
    } else {
        choice = json{{"index", 0},
                      {"text", text},
                      {"logprobs", nullptr},
                      {"finish_reason", "length"},
                      {"stop_reason", nullptr},
                      {"prompt_logprobs", nullptr}};
    }
    return json{{"id", meta.id},
                {"object", meta.api == Api::Chat ? "chat.completion" : "text_completion"},
                {"created", meta.created},
                {"model", meta.model},
                {"choices", json::array({std::move(choice)})},
                {"usage", usage_json(prompt_tokens, completion_tokens)},
                {"kv_transfer_params", nullptr}};
}

json role_chunk(const AnswerMeta& meta) {
    json c = chunk_base(meta);
    c["choices"] = json::array({json{{"index", 0},
                                     {"delta", {{"role", "assistant"}, {"content", ""}}},
                                     {"logprobs", nullptr},
                                     {"finish_reason", nullptr}}});
    return c;
}

json token_chunk(const AnswerMeta& meta, std::string_view text, bool last) {
    json c = chunk_base(meta);
    json finish = last ? json("length") : json(nullptr);
    if (meta.api == Api::Chat) {
        c["choices"] = json::array({json{{"index", 0},
                                         {"delta", {{"content", text}}},
                                         {"logprobs", nullptr},
                                         {"finish_reason", finish}}});
    } else {
        c["choices"] = json::array({json{{"index", 0},
                                         {"text", text},
                                         {"logprobs", nullptr},
                                         {"finish_reason", finish},
                                         {"stop_reason", nullptr}}});
    }
    return c;
}

json usage_chunk(const AnswerMeta& meta, int prompt_tokens, int completion_tokens) {
    json c = chunk_base(meta);
    c["choices"] = json::array();
    c["usage"] = usage_json(prompt_tokens, completion_tokens);
    return c;
}

std::string sse_event(const json& chunk) {
    return sse_data_event(chunk.dump());
}

std::string error_body(std::string_view message, std::string_view type, int code,
                       std::string_view param) {
    json err{{"message", message},
             {"type", type},
             {"param", param.empty() ? json(nullptr) : json(param)},
             {"code", code}};
    return json{{"error", std::move(err)}}.dump();
}

std::string fault_error_body(int status) {
    return error_body("pdsim injected fault (HTTP " + std::to_string(status) + ")",
                      status >= 500 ? "server_error" : "invalid_request_error", status);
}

}  // namespace pdr::sim
