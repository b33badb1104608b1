#include "router/api/validate.hpp"

#include <algorithm>
#include <cstdint>

namespace pdr::api {

namespace {

ValidationError fail(Errc e, std::string message, std::string param = {}) {
    return ValidationError{e, std::move(message), std::move(param)};
}

// The integer in `v` (unsigned values above INT64_MAX are clamped); false if it is not one.
bool as_int(const disagg::Json& v, std::int64_t& out) {
    if (v.is_number_unsigned()) {
        out = static_cast<std::int64_t>(std::min<std::uint64_t>(v.get<std::uint64_t>(), INT64_MAX));
        return true;
    }
    if (v.is_number_integer()) {
        out = v.get<std::int64_t>();
        return true;
    }
    return false;
}

// `key` absent or null, or an integer >= `min` (stored in `value`; -1 when absent). The prefill
// leg overwrites these fields, so a bad value must be refused here: otherwise P would prefill (and
// hold KV for) a request that D then rejects.
ValidationError check_count(const disagg::Json& j, const char* key, std::int64_t min,
                            std::int64_t& value) {
    value = -1;
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) {
        return {};
    }
    if (!as_int(*it, value)) {
        return fail(Errc::InvalidField, std::string(key) + " must be an integer", key);
    }
    if (value < min) {
        return fail(Errc::InvalidField,
                    std::string(key) + " must be at least " + std::to_string(min) + ", got " +
                        std::to_string(value),
                    key);
    }
    return {};
}

ValidationError check_generation_limits(const disagg::Json& j, bool stream) {
    std::int64_t limit = -1;  // the smallest upper bound given
    for (const char* key : {"max_tokens", "max_completion_tokens"}) {
        std::int64_t v = -1;
        if (auto err = check_count(j, key, 1, v); !err.ok()) {
            return err;
        }
        if (v >= 0 && (limit < 0 || v < limit)) {
            limit = v;
        }
    }
    for (const char* key : {"min_tokens", "min_completion_tokens"}) {
        std::int64_t v = -1;
        if (auto err = check_count(j, key, 0, v); !err.ok()) {
            return err;
        }
        if (limit >= 0 && v > limit) {
            return fail(
                Errc::InvalidField,
                std::string(key) + " must not exceed max_tokens (" + std::to_string(limit) + ")",
                key);
        }
    }
    auto options = j.find("stream_options");
    if (options != j.end() && !options->is_null()) {
        if (!options->is_object()) {
            return fail(Errc::InvalidField, "stream_options must be an object", "stream_options");
        }
        if (!stream) {
            return fail(Errc::InvalidField, "stream_options can only be set when stream is true",
                        "stream_options");
        }
    }
    return {};
}

}  // namespace

ValidationError parse_object(std::string_view body, disagg::Json& out) {
    if (!json_shape_ok(body)) {
        out = disagg::Json();
        return fail(Errc::BadJson, "request body nests JSON deeper than " +
                                       std::to_string(kMaxJsonDepth) +
                                       " levels or has an object with more than " +
                                       std::to_string(kMaxJsonObjectMembers) + " members");
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

ValidationError validate_generation(GenerationKind kind, std::string_view content_type,
                                    std::string_view body, ParsedGeneration& out) {
    if (!disagg::is_json_content_type(content_type)) {
        return fail(Errc::UnsupportedMediaType,
                    content_type.empty()
                        ? "missing Content-Type; expected application/json"
                        : "unsupported Content-Type '" + std::string(content_type) +
                              "'; expected application/json");
    }
    if (auto err = parse_object(body, out.body); !err.ok()) {
        return err;
    }
    const disagg::Json& j = out.body;
    auto model = j.find("model");
    if (model == j.end() || model->is_null()) {
        return fail(Errc::MissingField, "you must provide a model parameter", "model");
    }
    if (!model->is_string()) {
        return fail(Errc::InvalidField, "model must be a string", "model");
    }
    if (kind == GenerationKind::Completions) {
        auto prompt = j.find("prompt");
        if (prompt == j.end() || prompt->is_null()) {
            return fail(Errc::MissingField, "you must provide a prompt parameter", "prompt");
        }
    } else {
        auto messages = j.find("messages");
        if (messages == j.end() || messages->is_null()) {
            return fail(Errc::MissingField, "you must provide a messages parameter", "messages");
        }
        if (!messages->is_array()) {
            return fail(Errc::InvalidField, "messages must be an array", "messages");
        }
    }
    out.stream = false;
    auto stream = j.find("stream");
    if (stream != j.end() && !stream->is_null()) {
        if (!stream->is_boolean()) {
            return fail(Errc::InvalidField, "stream must be a boolean", "stream");
        }
        out.stream = stream->get<bool>();
    }
    return check_generation_limits(j, out.stream);
}

}  // namespace pdr::api
