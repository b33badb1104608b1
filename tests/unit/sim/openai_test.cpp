#include "sim/openai.hpp"
#include "sim/generation.hpp"

#include <gtest/gtest.h>

namespace pdr::sim {
namespace {

using nlohmann::json;

GenerationRequest parse_ok(Api api, const std::string& body) {
    GenerationRequest g;
    auto err = parse_generation_request(api, body, g);
    EXPECT_FALSE(err.has_value()) << (err ? err->message : "");
    return g;
}

RequestError parse_bad(Api api, const std::string& body) {
    GenerationRequest g;
    auto err = parse_generation_request(api, body, g);
    EXPECT_TRUE(err.has_value()) << body;
    return err.value_or(RequestError{});
}

TEST(OpenAiParse, CompletionDefaults) {
    auto g = parse_ok(Api::Completions, R"({"model":"m","prompt":"a b c"})");
    EXPECT_EQ(g.prompt, "a b c");
    EXPECT_EQ(g.prompt_tokens, 3);
    EXPECT_EQ(g.max_tokens, kDefaultMaxTokens);
    EXPECT_FALSE(g.stream);
    EXPECT_FALSE(g.include_usage);
    EXPECT_FALSE(g.kv_params.has_value());
    EXPECT_EQ(g.model, "m");
}

TEST(OpenAiParse, CompletionFields) {
    auto g = parse_ok(Api::Completions,
                      R"({"prompt":["x y"],"max_tokens":5,"stream":true,
                          "stream_options":{"include_usage":true},
                          "kv_transfer_params":{"do_remote_decode":true}})");
    EXPECT_EQ(g.prompt, "x y");
    EXPECT_EQ(g.max_tokens, 5);
    EXPECT_TRUE(g.stream);
    EXPECT_TRUE(g.include_usage);
    ASSERT_TRUE(g.kv_params.has_value());
    EXPECT_TRUE((*g.kv_params)["do_remote_decode"].get<bool>());
    // null kv_transfer_params means "none"
    auto n = parse_ok(Api::Completions, R"({"prompt":"p","kv_transfer_params":null})");
    EXPECT_FALSE(n.kv_params.has_value());
}

TEST(OpenAiParse, TokenIdPrompt) {
    auto g = parse_ok(Api::Completions, R"({"prompt":[5,6,7,8]})");
    EXPECT_EQ(g.prompt_tokens, 4);
    EXPECT_EQ(g.prompt, "5 6 7 8");
    auto g2 = parse_ok(Api::Completions, R"({"prompt":[[1,2]]})");
    EXPECT_EQ(g2.prompt_tokens, 2);
}

TEST(OpenAiParse, ChatUsesMaxCompletionTokens) {
    auto g = parse_ok(Api::Chat, R"({"messages":[{"role":"user","content":"hi you"}],
                                     "max_tokens":3,"max_completion_tokens":7})");
    EXPECT_EQ(g.prompt, "hi you");
    EXPECT_EQ(g.prompt_tokens, 2);
    EXPECT_EQ(g.max_tokens, 7);
    auto g2 = parse_ok(Api::Chat, R"({"messages":[{"role":"user","content":"x"}],"max_tokens":3})");
    EXPECT_EQ(g2.max_tokens, 3);
}

TEST(OpenAiParse, BadInput) {
    EXPECT_FALSE(parse_bad(Api::Completions, "{not json").message.empty());
    parse_bad(Api::Completions, "[1,2]");
    EXPECT_EQ(parse_bad(Api::Completions, R"({"model":"m"})").param, "prompt");
    EXPECT_EQ(parse_bad(Api::Completions, R"({"prompt":"p","max_tokens":0})").param, "max_tokens");
    EXPECT_EQ(parse_bad(Api::Completions, R"({"prompt":"p","max_tokens":"3"})").param,
              "max_tokens");
    EXPECT_EQ(parse_bad(Api::Completions, R"({"prompt":"p","max_tokens":9000})").param,
              "max_tokens");
    EXPECT_EQ(parse_bad(Api::Completions, R"({"prompt":"p","stream":"yes"})").param, "stream");
    EXPECT_EQ(parse_bad(Api::Completions, R"({"prompt":{"a":1}})").param, "prompt");
    EXPECT_EQ(parse_bad(Api::Completions, R"({"prompt":"p","kv_transfer_params":5})").param,
              "kv_transfer_params");
    EXPECT_EQ(parse_bad(Api::Chat, R"({"prompt":"p"})").param, "messages");
    EXPECT_EQ(parse_bad(Api::Chat, R"({"messages":[]})").param, "messages");
}

TEST(OpenAiShapes, CompletionAnswer) {
    auto meta = make_answer_meta(Api::Completions, "pdsim-model");
    EXPECT_EQ(meta.id.rfind("cmpl-", 0), 0u);
    EXPECT_EQ(meta.id.size(), 5u + 36u);
    EXPECT_GT(meta.created, 1'600'000'000);
    auto j = full_answer(meta, "a b ", 3, 2);
    EXPECT_EQ(j["object"], "text_completion");
    EXPECT_EQ(j["id"], meta.id);
    EXPECT_EQ(j["model"], "pdsim-model");
    EXPECT_EQ(j["choices"][0]["text"], "a b ");
    EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
    EXPECT_EQ(j["usage"]["prompt_tokens"], 3);
    EXPECT_EQ(j["usage"]["completion_tokens"], 2);
    EXPECT_EQ(j["usage"]["total_tokens"], 5);
}

TEST(OpenAiShapes, ChatAnswer) {
    auto meta = make_answer_meta(Api::Chat, "m");
    EXPECT_EQ(meta.id.rfind("chatcmpl-", 0), 0u);
    auto j = full_answer(meta, "hello ", 1, 1);
    EXPECT_EQ(j["object"], "chat.completion");
    EXPECT_EQ(j["choices"][0]["message"]["role"], "assistant");
    EXPECT_EQ(j["choices"][0]["message"]["content"], "hello ");
}

TEST(OpenAiShapes, StreamChunksConcatenateToText) {
    const std::string prompt = "stream me";
    for (Api api : {Api::Completions, Api::Chat}) {
        auto meta = make_answer_meta(api, "m");
        std::string joined;
        if (api == Api::Chat) {
            auto r = role_chunk(meta);
            EXPECT_EQ(r["object"], "chat.completion.chunk");
            EXPECT_EQ(r["choices"][0]["delta"]["role"], "assistant");
            joined += r["choices"][0]["delta"]["content"].get<std::string>();
        }
        for (int i = 0; i < 6; ++i) {
            auto c = token_chunk(meta, token_text(prompt, i), i == 5);
            EXPECT_EQ(c["id"], meta.id);
            EXPECT_EQ(c["object"], api == Api::Chat ? "chat.completion.chunk" : "text_completion");
            const auto& choice = c["choices"][0];
            joined += api == Api::Chat ? choice["delta"]["content"].get<std::string>()
                                       : choice["text"].get<std::string>();
            if (i == 5) {
                EXPECT_EQ(choice["finish_reason"], "length");
            } else {
                EXPECT_TRUE(choice["finish_reason"].is_null());
            }
        }
        EXPECT_EQ(joined, generate_text(prompt, 6));
        auto u = usage_chunk(meta, 2, 6);
        EXPECT_TRUE(u["choices"].is_array() && u["choices"].empty());
        EXPECT_EQ(u["usage"]["total_tokens"], 8);
    }
}

TEST(OpenAiShapes, SseEventFraming) {
    auto ev = sse_event(json{{"a", 1}});
    EXPECT_EQ(ev, "data: {\"a\":1}\n\n");
    EXPECT_EQ(kDoneEvent, "data: [DONE]\n\n");
}

TEST(OpenAiShapes, ErrorBodies) {
    auto j = json::parse(error_body("bad thing", "invalid_request_error", 400, "prompt"));
    EXPECT_EQ(j["error"]["message"], "bad thing");
    EXPECT_EQ(j["error"]["type"], "invalid_request_error");
    EXPECT_EQ(j["error"]["param"], "prompt");
    EXPECT_EQ(j["error"]["code"], 400);
    auto f = json::parse(fault_error_body(503));
    EXPECT_EQ(f["error"]["type"], "server_error");
    EXPECT_EQ(f["error"]["code"], 503);
    EXPECT_TRUE(json::parse(error_body("x", "t", 1))["error"]["param"].is_null());
}

}  // namespace
}  // namespace pdr::sim
