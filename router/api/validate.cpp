#include "router/api/validate.hpp"

#include <algorithm>
#include <cstdint>

namespace pdr::api {

namespace {

ValidationError fail(Errc e, std::string message, std::string param = {}) {
    return ValidationError{e, std::move(message), std::move(param)};
}

// `key` absent or null, or an integer >= `min` (stored in `value`; -1 when absent). The prefill
// leg overwrites these fields, so a bad value must be refused here: otherwise P would prefill (and
// hold KV for) a request that D then rejects.
ValidationError check_count(const JsonObjectView& j, const char* key, std::int64_t min,
                            std::int64_t& value) {
    value = -1;
    const JsonMember* m = j.find(key);
    if (m == nullptr || m->kind == JsonKind::Null) {
        return {};
    }
    if (m->kind != JsonKind::Number || !json_integer(m->value, value)) {
        return fail(Errc::InvalidField,
                    std::string(key) + " must be an integer (at most 9223372036854775807)", key);
    }
    if (value < min) {
        return fail(Errc::InvalidField,
                    std::string(key) + " must be at least " + std::to_string(min) + ", got " +
                        std::to_string(value),
                    key);
    }
    return {};
}

ValidationError check_generation_limits(GenerationKind kind, const JsonObjectView& j, bool stream) {
    // The limit the engine applies: for chat, max_completion_tokens when given (it replaces the
    // deprecated max_tokens, as in vLLM and OpenAI), else max_tokens; completions have only
    // max_tokens. Both are checked for shape: the prefill leg rewrites both.
    std::int64_t max_tokens = -1;
    std::int64_t max_completion_tokens = -1;
    if (auto err = check_count(j, "max_tokens", 1, max_tokens); !err.ok()) {
        return err;
    }
    if (auto err = check_count(j, "max_completion_tokens", 1, max_completion_tokens); !err.ok()) {
        return err;
    }
    const bool completion_limit =
        kind == GenerationKind::ChatCompletions && max_completion_tokens >= 0;
    const std::int64_t limit = completion_limit ? max_completion_tokens : max_tokens;
    const char* limit_key = completion_limit ? "max_completion_tokens" : "max_tokens";
    for (const char* key : {"min_tokens", "min_completion_tokens"}) {
        std::int64_t v = -1;
        if (auto err = check_count(j, key, 0, v); !err.ok()) {
            return err;
        }
        if (limit >= 0 && v > limit) {
            return fail(Errc::InvalidField,
                        std::string(key) + " must not exceed " + limit_key + " (" +
                            std::to_string(limit) + ")",
                        key);
        }
    }
    // One KV handle hands over one sequence: vLLM's P/D connectors serve n = 1 only (a list of
    // handles per choice is vllm#38900, open). Refused here in every KV mode, and on the direct
    // path too, so that the answer never depends on the prompt's length.
    std::int64_t n = -1;
    if (auto err = check_count(j, "n", 1, n); !err.ok()) {
        return err;
    }
    if (n > 1) {
        return fail(Errc::InvalidField,
                    "n must be 1 (got " + std::to_string(n) +
                        "): a disaggregated request has one KV handle, for one sequence; send n "
                        "requests instead",
                    "n");
    }
    const JsonMember* options = j.find("stream_options");
    if (options != nullptr && options->kind != JsonKind::Null) {
        if (options->kind != JsonKind::Object) {
            return fail(Errc::InvalidField, "stream_options must be an object", "stream_options");
        }
        if (!stream) {
            return fail(Errc::InvalidField, "stream_options can only be set when stream is true",
                        "stream_options");
        }
    }
    return {};
}

ValidationError shape_error() {
    return fail(Errc::BadJson, "request body nests JSON deeper than " +
                                   std::to_string(kMaxJsonDepth) +
                                   " levels or has an object with more than " +
                                   std::to_string(kMaxJsonObjectMembers) + " members");
}

}  // namespace

ValidationError parse_object(std::string_view body, disagg::Json& out) {
    if (!json_shape_ok(body)) {
        out = disagg::Json();
        return shape_error();
    }
    out = disagg::Json::parse(body, nullptr, false);
    if (out.is_discarded()) {
        out = disagg::Json();
        return fail(Errc::BadJson, body.empty() ? "request body is empty; expected a JSON object"
                                                : "request body is not valid JSON");
    }
    if (!out.is_object()) {
        return fail(Errc::NotAnObject, "request body must be a JSON object");
    }
    return {};
}

ValidationError parse_lease_refresh(std::string_view body, std::vector<std::string>& ids) {
    ids.clear();
    disagg::Json j;
    if (ValidationError err = parse_object(body, j); !err.ok()) {
        return err;
    }
    auto it = j.find("request_ids");
    if (it == j.end() || !it->is_array()) {
        return fail(it == j.end() ? Errc::MissingField : Errc::InvalidField,
                    "request_ids must be an array of strings", "request_ids");
    }
    if (it->size() > kMaxLeaseRefreshIds) {
        return fail(Errc::InvalidField,
                    "request_ids holds more than " + std::to_string(kMaxLeaseRefreshIds) +
                        " ids; send them in several requests",
                    "request_ids");
    }
    ids.reserve(it->size());
    for (const auto& v : *it) {
        if (!v.is_string()) {
            ids.clear();
            return fail(Errc::InvalidField, "request_ids must be an array of strings",
                        "request_ids");
        }
        ids.push_back(v.get<std::string>());
    }
    return {};
}

ValidationError validate_generation(GenerationKind kind, std::string_view content_type,
                                    std::string_view body, ParsedGeneration& out) {
    if (!disagg::is_json_content_type(content_type)) {
        return fail(Errc::UnsupportedMediaType,
                    content_type.empty()
                        ? "missing Content-Type; expected application/json"
                        : "unsupported Content-Type '" + std::string(content_type) +
                              "'; expected application/json");
    }
    switch (out.body.scan(body)) {
        case JsonScanStatus::Ok:
            break;
        case JsonScanStatus::NotObject:
            return fail(Errc::NotAnObject, "request body must be a JSON object");
        case JsonScanStatus::TooDeep:
        case JsonScanStatus::TooManyMembers:
            return shape_error();
        case JsonScanStatus::NotJson:
            // A text both malformed and too deep gets the shape message, as parse_object says.
            if (!json_shape_ok(body)) {
                return shape_error();
            }
            return fail(Errc::BadJson, body.empty()
                                           ? "request body is empty; expected a JSON object"
                                           : "request body is not valid JSON");
    }
    const JsonObjectView& j = out.body;
    const JsonMember* model = j.find("model");
    if (model == nullptr || model->kind == JsonKind::Null) {
        return fail(Errc::MissingField, "you must provide a model parameter", "model");
    }
    if (model->kind != JsonKind::String) {
        return fail(Errc::InvalidField, "model must be a string", "model");
    }
    if (kind == GenerationKind::Completions) {
        const JsonMember* prompt = j.find("prompt");
        if (prompt == nullptr || prompt->kind == JsonKind::Null) {
            return fail(Errc::MissingField, "you must provide a prompt parameter", "prompt");
        }
    } else {
        const JsonMember* messages = j.find("messages");
        if (messages == nullptr || messages->kind == JsonKind::Null) {
            return fail(Errc::MissingField, "you must provide a messages parameter", "messages");
        }
        if (messages->kind != JsonKind::Array) {
            return fail(Errc::InvalidField, "messages must be an array", "messages");
        }
    }
    out.stream = false;
    const JsonMember* stream = j.find("stream");
    if (stream != nullptr && stream->kind != JsonKind::Null) {
        if (stream->kind != JsonKind::Boolean) {
            return fail(Errc::InvalidField, "stream must be a boolean", "stream");
        }
        out.stream = stream->value == "true";
    }
    return check_generation_limits(kind, j, out.stream);
}

}  // namespace pdr::api
