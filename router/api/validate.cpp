#include "router/api/validate.hpp"

namespace pdr::api {

namespace {

ValidationError fail(Errc e, std::string message, std::string param = {}) {
    return ValidationError{e, std::move(message), std::move(param)};
}

}  // namespace

ValidationError parse_object(std::string_view body, disagg::Json& out) {
    if (!json_depth_ok(body)) {
        out = disagg::Json();
        return fail(Errc::BadJson, "request body nests JSON deeper than " +
                                       std::to_string(kMaxJsonDepth) + " levels");
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
    return {};
}

}  // namespace pdr::api
