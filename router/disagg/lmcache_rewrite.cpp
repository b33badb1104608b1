#include "router/disagg/lmcache_rewrite.hpp"

#include "net/common/sse_cut.hpp"
#include "router/disagg/rewrite.hpp"

#include <initializer_list>

namespace pdr::disagg::lmcache {

namespace {

// Fields only the chat API has: they do not go into the completion bodies sent to P and D. The
// chat template ones go to /tokenize instead. (logprobs/top_logprobs: chat's boolean logprobs
// is not the completion API's integer; they are dropped.)
constexpr std::string_view kTemplateFields[] = {"add_generation_prompt",
                                                "continue_final_message",
                                                "chat_template",
                                                "chat_template_kwargs",
                                                "tools",
                                                "documents",
                                                "add_special_tokens",
                                                "mm_processor_kwargs"};

bool integer_member(const JsonObjectView& body, std::string_view key,
                    std::optional<std::int64_t>& out, std::string& error, std::string& param) {
    const JsonMember* m = body.find(key);
    if (m == nullptr || m->kind == JsonKind::Null) {
        return true;
    }
    std::int64_t v = 0;
    if (m->kind != JsonKind::Number || !json_integer(m->value, v) || v < 0) {
        error = "\"" + std::string(key) + "\" must be a non-negative integer";
        param = std::string(key);
        return false;
    }
    out = v;
    return true;
}

// A JSON array of non-negative integers (token ids).
bool id_list(const Json& v, std::vector<std::int64_t>& out) {
    if (!v.is_array() || v.empty()) {
        return false;
    }
    out.clear();
    out.reserve(v.size());
    for (const auto& x : v) {
        if (!x.is_number_integer() || x.get<std::int64_t>() < 0) {
            return false;
        }
        out.push_back(x.get<std::int64_t>());
    }
    return true;
}

Json parse_object(std::string_view text) {
    Json j = Json::parse(text, nullptr, false);
    return j.is_object() ? j : Json(Json::value_t::discarded);
}

// The members of `body` named in `keys`, as `"key":value` pairs after a comma each.
void append_members(std::string& out, const JsonObjectView& body,
                    std::initializer_list<std::string_view> keys) {
    for (std::string_view k : keys) {
        if (const JsonMember* m = body.find(k)) {
            out.append(",").append(m->key_text).append(":").append(m->value);
        }
    }
}

void adjust_usage(Json& usage, std::int64_t prompt_tokens) {
    if (!usage.is_object()) {
        return;
    }
    std::int64_t completion = 0;
    if (auto it = usage.find("completion_tokens"); it != usage.end() && it->is_number_integer()) {
        completion = it->get<std::int64_t>();
    }
    usage["prompt_tokens"] = prompt_tokens;
    usage["completion_tokens"] = completion + 1;  // P's token
    usage["total_tokens"] = prompt_tokens + completion + 1;
}

// Chat content parts that are text (OpenAI's and vLLM's names); any other part is media.
bool is_text_part(std::string_view type) {
    return type == "text" || type == "input_text" || type == "output_text" || type == "refusal";
}

bool text_only_messages(const JsonObjectView& body, std::string& error, std::string& param) {
    const JsonMember* messages = body.find("messages");
    if (messages == nullptr || messages->value.find("\"type\"") == std::string_view::npos) {
        return true;  // string contents only (no part has a type)
    }
    const Json list = Json::parse(messages->value, nullptr, false);
    if (!list.is_array()) {
        return true;
    }
    for (std::size_t i = 0; i < list.size(); ++i) {
        const Json& m = list[i];
        auto content = m.is_object() ? m.find("content") : m.end();
        if (!m.is_object() || content == m.end() || !content->is_array()) {
            continue;
        }
        for (const Json& part : *content) {
            auto type = part.is_object() ? part.find("type") : part.end();
            if (part.is_object() && type != part.end() && type->is_string() &&
                !is_text_part(type->get<std::string>())) {
                error = "the lmcache KV mode serves text only: message " + std::to_string(i) +
                        " has a \"" + type->get<std::string>() +
                        "\" part (the legs carry token ids, which hold no images or audio)";
                param = "messages";
                return false;
            }
        }
    }
    return true;
}

std::string text_of(const Json& choice) {
    auto it = choice.find("text");
    return it != choice.end() && it->is_string() ? it->get<std::string>() : std::string();
}

}  // namespace

bool read_client_ask(const JsonObjectView& body, Api api, bool stream, ClientAsk& out,
                     std::string& error, std::string& param) {
    out = ClientAsk{};
    out.api = api;
    out.stream = stream;
    if (const JsonMember* so = body.find("stream_options"); so && so->kind == JsonKind::Object) {
        JsonObjectView opts;
        if (opts.scan(so->value) == JsonScanStatus::Ok) {
            const JsonMember* iu = opts.find("include_usage");
            out.include_usage = iu != nullptr && iu->value == "true";
        }
    }
    std::optional<std::int64_t> n, best_of, max_completion;
    if (!integer_member(body, "n", n, error, param) ||
        !integer_member(body, "best_of", best_of, error, param) ||
        !integer_member(body, "max_tokens", out.max_tokens, error, param) ||
        !integer_member(body, "max_completion_tokens", max_completion, error, param) ||
        !integer_member(body, "min_tokens", out.min_tokens, error, param)) {
        return false;
    }
    if ((n && *n != 1) || (best_of && *best_of != 1)) {
        error = "the lmcache KV mode serves one choice per request (n and best_of must be 1)";
        param = n && *n != 1 ? "n" : "best_of";
        return false;
    }
    if (max_completion) {
        out.max_tokens = max_completion;
    }
    if (out.max_tokens && *out.max_tokens == 0) {
        error = "max_tokens must be at least 1";
        param = "max_tokens";
        return false;
    }
    if (api == Api::Chat) {
        // validate_generation checked "messages"; its parts must be text: the prefill and decode
        // legs carry token ids, which hold no image, audio or video.
        return text_only_messages(body, error, param);
    }
    if (body.find("multi_modal_data") != nullptr) {
        error =
            "multi_modal_data is not served in the lmcache KV mode (the decode leg's prompt "
            "is token ids, which carry no images or audio)";
        param = "multi_modal_data";
        return false;
    }
    if (const JsonMember* echo = body.find("echo"); echo && echo->value == "true") {
        error = "echo is not served in the lmcache KV mode (the decode leg's prompt is token ids)";
        param = "echo";
        return false;
    }
    const JsonMember* prompt = body.find("prompt");
    const std::string bad_prompt =
        "the lmcache KV mode serves one prompt per request: a string, or a list of token ids";
    if (prompt == nullptr) {
        error = bad_prompt;
        param = "prompt";
        return false;
    }
    if (prompt->kind == JsonKind::String) {
        out.prompt_text = std::string(prompt->value);
        return true;
    }
    Json p = prompt->kind == JsonKind::Array ? Json::parse(prompt->value, nullptr, false) : Json();
    if (p.is_array() && p.size() == 1 && p[0].is_string()) {
        out.prompt_text = p[0].dump();
        return true;
    }
    std::vector<std::int64_t> ids;
    if (id_list(p, ids) || (p.is_array() && p.size() == 1 && id_list(p[0], ids))) {
        out.tokens = std::move(ids);
        return true;
    }
    error = bad_prompt;
    param = "prompt";
    return false;
}

std::string make_tokenize_body(const JsonObjectView& body, const ClientAsk& ask) {
    std::string out = "{";
    if (const JsonMember* model = body.find("model")) {
        out.append("\"model\":").append(model->value);
    }
    if (ask.api == Api::Completions) {
        out.append(out.size() > 1 ? "," : "").append("\"prompt\":").append(ask.prompt_text);
        append_members(out, body, {"add_special_tokens"});
    } else {
        if (const JsonMember* m = body.find("messages")) {
            out.append(out.size() > 1 ? "," : "").append("\"messages\":").append(m->value);
        }
        for (std::string_view k : kTemplateFields) {
            append_members(out, body, {k});
        }
    }
    out.append("}");
    return out;
}

bool parse_tokens(std::string_view answer, std::vector<std::int64_t>& out, std::string& error) {
    const Json j = parse_object(answer);
    if (j.is_discarded()) {
        error = "its /tokenize answer is not a JSON object";
        return false;
    }
    auto it = j.find("tokens");
    if (it == j.end() || !id_list(*it, out)) {
        error = "its /tokenize answer has no \"tokens\" list of token ids";
        return false;
    }
    return true;
}

std::string token_array(const std::vector<std::int64_t>& ids, const std::int64_t* extra) {
    std::string out = "[";
    out.reserve(ids.size() * 7 + 8);
    for (std::size_t i = 0; i < ids.size(); ++i) {
        if (i > 0) {
            out.push_back(',');
        }
        out.append(std::to_string(ids[i]));
    }
    if (extra != nullptr) {
        out.append(ids.empty() ? "" : ",").append(std::to_string(*extra));
    }
    out.push_back(']');
    return out;
}

std::string make_prefill_body(const JsonObjectView& body, const std::vector<std::int64_t>& ids,
                              const DisaggSpec* spec) {
    Json params = {{"ret_first_tok", true}};
    if (spec != nullptr) {
        params["disagg_spec"] = {{"req_id", spec->req_id},
                                 {"receiver_host", spec->receiver_host},
                                 {"receiver_init_port", spec->init_ports},
                                 {"receiver_alloc_port", spec->alloc_ports}};
    }
    const std::string prompt = token_array(ids);
    const std::string kv = dump(params);
    using Op = JsonEdit::Op;
    return body.rewrite({
        {"messages", {}, Op::Erase},
        {"prompt", prompt},
        {"max_tokens", "1"},
        {"max_completion_tokens", {}, Op::Erase},
        {"min_tokens", {}, Op::Erase},
        {"min_completion_tokens", {}, Op::Erase},
        {"stream", "false"},
        {"stream_options", {}, Op::Erase},
        {"logprobs", {}, Op::Erase},
        {"top_logprobs", {}, Op::Erase},
        {"tool_choice", {}, Op::Erase},
        {"parallel_tool_calls", {}, Op::Erase},
        {kTemplateFields[0], {}, Op::Erase},
        {kTemplateFields[1], {}, Op::Erase},
        {kTemplateFields[2], {}, Op::Erase},
        {kTemplateFields[3], {}, Op::Erase},
        {kTemplateFields[4], {}, Op::Erase},
        {kTemplateFields[5], {}, Op::Erase},
        {kTemplateFields[6], {}, Op::Erase},
        {kTemplateFields[7], {}, Op::Erase},
        {"kv_transfer_params", kv},
    });
}

bool parse_first_token(std::string_view answer, FirstToken& out, std::string& error) {
    const Json j = parse_object(answer);
    if (j.is_discarded()) {
        error = "its prefill answer is not a JSON object";
        return false;
    }
    auto kv = j.find("kv_transfer_params");
    auto tok = kv != j.end() && kv->is_object() ? kv->find("first_tok") : j.end();
    if (kv == j.end() || !kv->is_object() || tok == kv->end() || !tok->is_number_integer() ||
        tok->get<std::int64_t>() < 0) {
        error =
            "its prefill answer has no kv_transfer_params.first_tok (is P's LMCache "
            "configured as a PD producer?)";
        return false;
    }
    out.id = tok->get<std::int64_t>();
    auto choices = j.find("choices");
    if (choices == j.end() || !choices->is_array() || choices->empty() ||
        !(*choices)[0].is_object()) {
        error = "its prefill answer has no choices";
        return false;
    }
    const Json& c = (*choices)[0];
    out.text = text_of(c);
    auto fr = c.find("finish_reason");
    out.finish_reason = fr != c.end() && fr->is_string() ? fr->get<std::string>() : std::string();
    auto model = j.find("model");
    out.model = model != j.end() && model->is_string() ? model->get<std::string>() : "";
    return true;
}

std::string make_decode_body(const JsonObjectView& body, const ClientAsk& ask,
                             const std::vector<std::int64_t>& ids, std::int64_t first) {
    const std::string prompt = token_array(ids, &first);
    const std::string max_tokens = ask.max_tokens ? std::to_string(*ask.max_tokens - 1) : "";
    const std::string min_tokens =
        ask.min_tokens ? std::to_string(*ask.min_tokens > 0 ? *ask.min_tokens - 1 : 0) : "";
    using Op = JsonEdit::Op;
    return body.rewrite({
        {"messages", {}, Op::Erase},
        {"prompt", prompt},
        {"max_tokens", max_tokens, ask.max_tokens ? Op::Set : Op::Erase},
        {"max_completion_tokens", {}, Op::Erase},
        {"min_tokens", min_tokens, Op::SetIfPresent},
        {"min_completion_tokens", {}, Op::Erase},
        {"logprobs", {}, ask.api == Api::Chat ? Op::Erase : Op::SetIfPresent},
        {"top_logprobs", {}, Op::Erase},
        {"tool_choice", {}, Op::Erase},
        {"parallel_tool_calls", {}, Op::Erase},
        {kTemplateFields[0], {}, Op::Erase},
        {kTemplateFields[1], {}, Op::Erase},
        {kTemplateFields[2], {}, Op::Erase},
        {kTemplateFields[3], {}, Op::Erase},
        {kTemplateFields[4], {}, Op::Erase},
        {kTemplateFields[5], {}, Op::Erase},
        {kTemplateFields[6], {}, Op::Erase},
        {kTemplateFields[7], {}, Op::Erase},
        {"kv_transfer_params", {}, Op::Erase},
    });
}

AnswerShaper::AnswerShaper(const ClientAsk& ask, std::string_view request_id, FirstToken first,
                           std::int64_t prompt_tokens, std::int64_t created)
    : api_(ask.api),
      include_usage_(ask.stream && ask.include_usage),
      id_((ask.api == Api::Chat ? "chatcmpl-" : "cmpl-") + std::string(request_id)),
      first_(std::move(first)),
      prompt_tokens_(prompt_tokens),
      created_(created) {}

std::string AnswerShaper::chunk(std::string_view text, std::string_view finish_reason,
                                bool role) const {
    Json choice;
    choice["index"] = 0;
    if (api_ == Api::Chat) {
        Json delta = Json::object();
        if (role) {
            delta["role"] = "assistant";
        }
        if (role || !text.empty() || finish_reason.empty()) {
            delta["content"] = std::string(text);
        }
        choice["delta"] = std::move(delta);
    } else {
        choice["text"] = std::string(text);
    }
    choice["logprobs"] = nullptr;
    choice["finish_reason"] = finish_reason.empty() ? Json(nullptr) : Json(finish_reason);
    Json c = {{"id", id_},
              {"object", api_ == Api::Chat ? "chat.completion.chunk" : "text_completion"},
              {"created", created_},
              {"model", first_.model},
              {"choices", Json::array({std::move(choice)})}};
    return sse_data_event(dump(c));
}

std::string AnswerShaper::stream_start() {
    std::string out;
    if (api_ == Api::Chat) {
        out = chunk("", "", true);
    }
    out += chunk(first_.text, "", false);
    return out;
}

bool AnswerShaper::whole(std::string_view d_answer, std::string& out) {
    Json d = parse_object(d_answer);
    if (d.is_discarded()) {
        return false;
    }
    auto choices = d.find("choices");
    if (choices == d.end() || !choices->is_array() || choices->empty() ||
        !(*choices)[0].is_object()) {
        return false;
    }
    Json& c = (*choices)[0];
    const std::string text = first_.text + text_of(c);
    Json usage = d.contains("usage") ? d["usage"] : Json();
    adjust_usage(usage, prompt_tokens_);
    if (api_ == Api::Completions) {
        c["text"] = text;
        if (usage.is_object()) {
            d["usage"] = std::move(usage);
        }
        out = dump(d);
        return true;
    }
    Json choice = {{"index", 0},
                   {"message", {{"role", "assistant"}, {"content", text}}},
                   {"logprobs", nullptr},
                   {"finish_reason", c.contains("finish_reason") ? c["finish_reason"] : Json()}};
    Json chat = {{"id", id_},
                 {"object", "chat.completion"},
                 {"created", created_},
                 {"model", d.contains("model") ? d["model"] : Json(first_.model)},
                 {"choices", Json::array({std::move(choice)})}};
    if (usage.is_object()) {
        chat["usage"] = std::move(usage);
    }
    out = dump(chat);
    return true;
}

bool AnswerShaper::stream_events(std::string_view events, std::string& out) {
    out.clear();
    std::size_t pos = 0;
    std::string data;
    bool has_data = false;
    std::string others;  // non-data lines of the current event, passed on as they are
    auto finish_event = [&]() -> bool {
        if (!has_data) {
            if (!others.empty()) {
                out.append(others).append("\n");
            }
            others.clear();
            return true;
        }
        has_data = false;
        Json j = data == "[DONE]" ? Json() : Json::parse(data, nullptr, false);
        if (data == "[DONE]" || (j.is_object() && j.contains("error"))) {
            out.append(others).append("data: ").append(data).append("\n\n");
            others.clear();
            data.clear();
            return true;
        }
        others.clear();
        data.clear();
        if (!j.is_object()) {
            return false;
        }
        auto usage_it = j.find("usage");
        Json usage = usage_it != j.end() ? *usage_it : Json();
        adjust_usage(usage, prompt_tokens_);
        auto choices = j.find("choices");
        if (choices == j.end() || !choices->is_array()) {
            return false;
        }
        if (api_ == Api::Completions) {
            j["id"] = id_;
            j["created"] = created_;
            if (usage.is_object()) {
                j["usage"] = std::move(usage);
            }
            out.append(sse_data_event(dump(j)));
            return true;
        }
        Json chat_choices = Json::array();
        for (const auto& c : *choices) {
            if (!c.is_object()) {
                return false;
            }
            Json fr = c.contains("finish_reason") ? c["finish_reason"] : Json();
            Json delta = Json::object();
            const std::string text = text_of(c);
            if (!text.empty() || fr.is_null()) {
                delta["content"] = text;
            }
            // D's index as it is when it is a number (json::value() throws on another type).
            const auto index = c.find("index");
            Json index_of = index != c.end() && index->is_number() ? *index : Json(0);
            chat_choices.push_back({{"index", std::move(index_of)},
                                    {"delta", std::move(delta)},
                                    {"logprobs", nullptr},
                                    {"finish_reason", std::move(fr)}});
        }
        Json chat = {{"id", id_},
                     {"object", "chat.completion.chunk"},
                     {"created", created_},
                     {"model", j.contains("model") ? j["model"] : Json(first_.model)},
                     {"choices", std::move(chat_choices)}};
        if (usage.is_object()) {
            chat["usage"] = std::move(usage);
        }
        out.append(sse_data_event(dump(chat)));
        return true;
    };
    while (pos < events.size()) {
        std::size_t eol = events.find_first_of("\r\n", pos);
        const std::string_view line =
            events.substr(pos, eol == std::string_view::npos ? std::string_view::npos : eol - pos);
        if (eol == std::string_view::npos) {
            pos = events.size();
        } else {
            pos =
                eol +
                (events[eol] == '\r' && eol + 1 < events.size() && events[eol + 1] == '\n' ? 2 : 1);
        }
        if (line.empty()) {
            if (!finish_event()) {
                return false;
            }
            continue;
        }
        if (line.starts_with("data:")) {
            std::string_view v = line.substr(5);
            if (v.starts_with(' ')) {
                v.remove_prefix(1);
            }
            if (has_data) {
                data.push_back('\n');
            }
            data.append(v);
            has_data = true;
        } else {
            others.append(line).append("\n");
        }
    }
    return finish_event();
}

std::string AnswerShaper::first_only_whole() const {
    const std::string finish = first_.finish_reason.empty() ? "length" : first_.finish_reason;
    Json usage = {{"prompt_tokens", prompt_tokens_},
                  {"completion_tokens", 1},
                  {"total_tokens", prompt_tokens_ + 1}};
    Json choice = {{"index", 0}};
    if (api_ == Api::Chat) {
        choice["message"] = {{"role", "assistant"}, {"content", first_.text}};
    } else {
        choice["text"] = first_.text;
    }
    choice["logprobs"] = nullptr;
    choice["finish_reason"] = finish;
    return dump({{"id", id_},
                 {"object", api_ == Api::Chat ? "chat.completion" : "text_completion"},
                 {"created", created_},
                 {"model", first_.model},
                 {"choices", Json::array({std::move(choice)})},
                 {"usage", std::move(usage)}});
}

std::string AnswerShaper::first_only_stream() {
    std::string out = stream_start();
    out += chunk("", first_.finish_reason.empty() ? "length" : first_.finish_reason, false);
    if (include_usage_) {
        Json u = {{"id", id_},
                  {"object", api_ == Api::Chat ? "chat.completion.chunk" : "text_completion"},
                  {"created", created_},
                  {"model", first_.model},
                  {"choices", Json::array()},
                  {"usage",
                   {{"prompt_tokens", prompt_tokens_},
                    {"completion_tokens", 1},
                    {"total_tokens", prompt_tokens_ + 1}}}};
        out += sse_data_event(dump(u));
    }
    out += "data: [DONE]\n\n";
    return out;
}

}  // namespace pdr::disagg::lmcache
