// vLLM's serving routes besides generation, which pdrouter passes through to one instance
// (docs/protocols.md, "Pass-through routes"): /version, /detokenize, /v1/embeddings, /pooling,
// /classify, /score (/v1/score), /rerank (/v1/rerank, /v2/rerank). Each answers a small,
// deterministic body in the shape of vLLM's protocol (vllm/entrypoints/openai/protocol.py and
// the pooling/score protocols under vllm/entrypoints/): enough for a client or a test to tell
// that the call reached an engine and which one.
#include "net/common/json_limits.hpp"
#include "sim/generation.hpp"
#include "sim/sim_impl.hpp"

#include <algorithm>
#include <cstdint>

namespace pdr::sim {

using nlohmann::json;

namespace {

constexpr std::string_view kInvalidType = "invalid_request_error";

// A stable vector for a text: 8 numbers in [-1, 1) from its token ids.
json embedding_of(std::string_view text) {
    std::uint64_t h = 1469598103934665603ULL;
    for (const TokenId id : tokenize(text)) {
        h = (h ^ static_cast<std::uint64_t>(id)) * 1099511628211ULL;
    }
    json v = json::array();
    for (int i = 0; i < 8; ++i) {
        h = h * 6364136223846793005ULL + 1442695040888963407ULL;
        v.push_back(static_cast<double>(h >> 40) / static_cast<double>(1ULL << 23) - 1.0);
    }
    return v;
}

// The texts of an "input" (embeddings, pooling, classify): a string or a list of strings.
bool input_texts(const json& b, const char* key, std::vector<std::string>& out) {
    auto it = b.find(key);
    if (it == b.end()) {
        return false;
    }
    if (it->is_string()) {
        out.push_back(it->get<std::string>());
        return true;
    }
    if (!it->is_array() || it->empty()) {
        return false;
    }
    for (const auto& s : *it) {
        if (!s.is_string()) {
            return false;
        }
        out.push_back(s.get<std::string>());
    }
    return true;
}

// A score in [0, 1) for a pair of texts.
double score_of(std::string_view a, std::string_view b) {
    const json ea = embedding_of(a);
    const json eb = embedding_of(b);
    double dot = 0;
    for (std::size_t i = 0; i < ea.size(); ++i) {
        dot += ea[i].get<double>() * eb[i].get<double>();
    }
    return (dot / 8.0 + 1.0) / 2.0;
}

// The answer to one serving route (a plain function: GCC 12 miscompiles some brace-initialized
// JSON inside coroutines).
struct Answer {
    http::status status = http::status::ok;
    std::string body;     // ok: the JSON text
    std::string message;  // else: the error message
    std::string param;

    static Answer ok(const json& j) { return Answer{http::status::ok, dump_json(j), {}, {}}; }
    static Answer error(std::string text, std::string name = {}) {
        return Answer{http::status::bad_request, {}, std::move(text), std::move(name)};
    }
};

Answer serving_answer(std::string_view path, std::string_view request_body,
                      const std::string& default_model) {
    if (path == "/version") {
        return Answer::ok(json{{"version", "0.0.0+pdsim"}});
    }
    json b = parse_untrusted_json(request_body);
    if (!b.is_object()) {
        return Answer::error("body must be a JSON object");
    }
    const std::string model = b.value("model", default_model);
    if (path == "/detokenize") {
        auto t = b.find("tokens");
        if (t == b.end() || !t->is_array()) {
            return Answer::error("'tokens' must be a list of ids", "tokens");
        }
        std::string text;
        for (const auto& id : *t) {
            if (!id.is_number_integer()) {
                return Answer::error("'tokens' holds a non-integer", "tokens");
            }
            text += id_text(id.get<TokenId>());
        }
        return Answer::ok(json{{"prompt", text}});
    }
    if (path == "/v1/embeddings" || path == "/pooling" || path == "/classify") {
        std::vector<std::string> texts;
        if (!input_texts(b, "input", texts)) {
            return Answer::error("'input' must be a string or a non-empty list of strings",
                                 "input");
        }
        json data = json::array();
        int tokens = 0;
        for (std::size_t i = 0; i < texts.size(); ++i) {
            tokens += count_prompt_tokens(texts[i]);
            if (path == "/classify") {
                const double p = score_of(texts[i], "positive");
                data.push_back({{"index", i},
                                {"label", std::string(p >= 0.5 ? "positive" : "negative")},
                                {"probs", {1.0 - p, p}},
                                {"num_classes", 2}});
            } else {
                const bool pooling = path == "/pooling";
                json item{{"index", i}, {"object", pooling ? std::string("pooling") : "embedding"}};
                item[pooling ? std::string("data") : std::string("embedding")] =
                    embedding_of(texts[i]);
                data.push_back(std::move(item));
            }
        }
        json out{{"object", "list"},
                 {"model", model},
                 {"data", std::move(data)},
                 {"usage", {{"prompt_tokens", tokens}, {"total_tokens", tokens}}}};
        return Answer::ok(out);
    }
    // /score, /v1/score: text_1 against each text_2. /rerank, /v1/rerank, /v2/rerank: query
    // against each document, best first.
    const bool rerank = path.ends_with("/rerank");
    std::vector<std::string> first;
    std::vector<std::string> second;
    if (!input_texts(b, rerank ? "query" : "text_1", first) || first.size() != 1 ||
        !input_texts(b, rerank ? "documents" : "text_2", second)) {
        std::string what = "body needs ";
        what += rerank ? "'query' (a string) and 'documents' (a list of strings)"
                       : "'text_1' (a string) and 'text_2' (a string or a list)";
        return Answer::error(what);
    }
    json data = json::array();
    for (std::size_t i = 0; i < second.size(); ++i) {
        const double s = score_of(first[0], second[i]);
        if (rerank) {
            data.push_back(
                {{"index", i}, {"document", {{"text", second[i]}}}, {"relevance_score", s}});
        } else {
            data.push_back({{"index", i}, {"object", "score"}, {"score", s}});
        }
    }
    if (rerank) {
        std::stable_sort(data.begin(), data.end(), [](const json& a, const json& c) {
            return a["relevance_score"].get<double>() > c["relevance_score"].get<double>();
        });
    }
    json out{{"model", model}};
    out[rerank ? std::string("results") : std::string("data")] = std::move(data);
    return Answer::ok(out);
}

}  // namespace

awaitable<void> SimServer::Impl::handle_serving(server::Exchange& x, std::string_view path) {
    auto self = shared_from_this();
    const auto& req = x.request();
    ++state.counters.serving_requests;
    state.log_request(path, headers_json(req), req.body());
    Answer a = serving_answer(path, req.body(), cfg.model);
    if (a.status == http::status::ok) {
        co_await send_json(x, a.status, std::move(a.body));
    } else {
        co_await send_error(x, a.status, a.message, kInvalidType, a.param);
    }
}

}  // namespace pdr::sim
