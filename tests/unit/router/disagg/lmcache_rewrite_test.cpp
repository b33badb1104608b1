// Rewrite rules of the LMCache flow (PROTOCOLS.md §5): what the client may ask, the /tokenize,
// prefill and decode bodies, P's first token, and the client's answer shaped from P's token and
// D's completion (chat converted; usage counts the prompt once and P's token as generated).
#include "router/disagg/lmcache_rewrite.hpp"

#include "router/disagg/rewrite.hpp"

#include <gtest/gtest.h>

namespace pdr::disagg::lmcache {
namespace {

struct Scanned {
    std::string text;
    JsonObjectView view;
    explicit Scanned(std::string t) : text(std::move(t)) {
        EXPECT_EQ(view.scan(text), JsonScanStatus::Ok) << text;
    }
};

ClientAsk ask_of(const Scanned& s, Api api, bool stream = false) {
    ClientAsk ask;
    std::string error, param;
    EXPECT_TRUE(read_client_ask(s.view, api, stream, ask, error, param)) << error;
    return ask;
}

std::string refusal(std::string body, Api api = Api::Completions) {
    Scanned s(std::move(body));
    ClientAsk ask;
    std::string error, param;
    EXPECT_FALSE(read_client_ask(s.view, api, false, ask, error, param)) << s.text;
    return param;
}

TEST(LmcacheAsk, ReadsPromptFormsAndLimits) {
    Scanned text(R"({"model":"m","prompt":"hello world","max_tokens":5,"min_tokens":2})");
    ClientAsk a = ask_of(text, Api::Completions);
    EXPECT_EQ(a.prompt_text, "\"hello world\"");
    EXPECT_FALSE(a.tokens);
    EXPECT_EQ(a.max_tokens, 5);
    EXPECT_EQ(a.min_tokens, 2);

    Scanned one(R"({"prompt":["only one"]})");
    EXPECT_EQ(ask_of(one, Api::Completions).prompt_text, "\"only one\"");

    Scanned ids(R"({"prompt":[1,2,3]})");
    EXPECT_EQ(ask_of(ids, Api::Completions).tokens, (std::vector<std::int64_t>{1, 2, 3}));
    Scanned nested(R"({"prompt":[[4,5]]})");
    EXPECT_EQ(ask_of(nested, Api::Completions).tokens, (std::vector<std::int64_t>{4, 5}));

    Scanned chat(R"({"messages":[],"max_completion_tokens":7,"max_tokens":3,"stream":true,
                    "stream_options":{"include_usage":true}})");
    ClientAsk c = ask_of(chat, Api::Chat, true);
    EXPECT_EQ(c.max_tokens, 7);  // max_completion_tokens wins
    EXPECT_TRUE(c.include_usage);
}

TEST(LmcacheAsk, RefusesWhatOnePrefillCannotServe) {
    EXPECT_EQ(refusal(R"({"prompt":["a","b"]})"), "prompt");
    EXPECT_EQ(refusal(R"({"prompt":[[1],[2]]})"), "prompt");
    EXPECT_EQ(refusal(R"({"prompt":[1,-2]})"), "prompt");
    EXPECT_EQ(refusal(R"({"model":"m"})"), "prompt");
    EXPECT_EQ(refusal(R"({"prompt":"x","n":2})"), "n");
    EXPECT_EQ(refusal(R"({"prompt":"x","best_of":3})"), "best_of");
    EXPECT_EQ(refusal(R"({"prompt":"x","echo":true})"), "echo");
    EXPECT_EQ(refusal(R"({"prompt":"x","max_tokens":0})"), "max_tokens");
    EXPECT_EQ(refusal(R"({"prompt":"x","max_tokens":1.5})"), "max_tokens");
    EXPECT_EQ(refusal(R"({"messages":[],"n":2})", Api::Chat), "n");
    // Media: the legs carry token ids, which hold none.
    EXPECT_EQ(refusal(R"({"messages":[{"role":"user","content":[{"type":"text","text":"a"},)"
                      R"({"type":"image_url","image_url":{"url":"data:,"}}]}]})",
                      Api::Chat),
              "messages");
    EXPECT_EQ(refusal(R"({"messages":[{"role":"user","content":[{"type":"input_audio",)"
                      R"("input_audio":{"data":"","format":"wav"}}]}]})",
                      Api::Chat),
              "messages");
    EXPECT_EQ(refusal(R"({"prompt":"x","multi_modal_data":{"image":"u"}})"), "multi_modal_data");
    Scanned text_parts(R"({"messages":[{"role":"user","content":[{"type":"text","text":"a"}]},)"
                       R"({"role":"assistant","content":"the \"type\" is b"}]})");
    ClientAsk ask;
    std::string error, param;
    EXPECT_TRUE(read_client_ask(text_parts.view, Api::Chat, false, ask, error, param)) << error;
}

TEST(LmcacheBodies, TokenizeCarriesThePromptOrTheChatTemplateFields) {
    Scanned c(R"({"model":"m","prompt":"hi there","temperature":0})");
    EXPECT_EQ(make_tokenize_body(c.view, ask_of(c, Api::Completions)),
              R"({"model":"m","prompt":"hi there"})");
    Scanned chat(R"({"model":"m","messages":[{"role":"user","content":"x"}],"tools":[],
                    "add_generation_prompt":true,"chat_template_kwargs":{"a":1},"seed":3})");
    const Json t = Json::parse(make_tokenize_body(chat.view, ask_of(chat, Api::Chat)));
    EXPECT_EQ(t["messages"][0]["content"], "x");
    EXPECT_EQ(t["add_generation_prompt"], true);
    EXPECT_EQ(t["chat_template_kwargs"]["a"], 1);
    EXPECT_TRUE(t.contains("tools"));
    EXPECT_FALSE(t.contains("seed"));
}

TEST(LmcacheBodies, ParsesTokensStrictly) {
    std::vector<std::int64_t> ids;
    std::string why;
    EXPECT_TRUE(parse_tokens(R"({"count":2,"tokens":[7,8],"max_model_len":10})", ids, why));
    EXPECT_EQ(ids, (std::vector<std::int64_t>{7, 8}));
    EXPECT_FALSE(parse_tokens(R"({"tokens":[]})", ids, why));
    EXPECT_FALSE(parse_tokens(R"({"tokens":["a"]})", ids, why));
    EXPECT_FALSE(parse_tokens(R"([1,2])", ids, why));
    EXPECT_FALSE(parse_tokens("not json", ids, why));
}

TEST(LmcacheBodies, PrefillAsksForTheFirstTokenAndNamesDsReceiver) {
    Scanned s(R"({"model":"m","messages":[{"role":"user","content":"x"}],"stream":true,
                 "stream_options":{"include_usage":true},"max_completion_tokens":9,
                 "temperature":0.3,"tools":[],"logprobs":true,"kv_transfer_params":{"x":1}})");
    DisaggSpec spec{"req-1", "10.0.0.2", {8300, 8301}, {8310, 8311}};
    const Json p = Json::parse(make_prefill_body(s.view, {5, 6, 7}, &spec));
    EXPECT_EQ(p["prompt"], Json::parse("[5,6,7]"));
    EXPECT_EQ(p["max_tokens"], 1);
    EXPECT_EQ(p["stream"], false);
    EXPECT_EQ(p["temperature"], 0.3);
    for (const char* gone :
         {"messages", "stream_options", "max_completion_tokens", "tools", "logprobs"}) {
        EXPECT_FALSE(p.contains(gone)) << gone;
    }
    EXPECT_EQ(p["kv_transfer_params"],
              Json::parse(R"({"ret_first_tok":true,"disagg_spec":{"req_id":"req-1",
                  "receiver_host":"10.0.0.2","receiver_init_port":[8300,8301],
                  "receiver_alloc_port":[8310,8311]}})"));
    const Json alone = Json::parse(make_prefill_body(s.view, {5}, nullptr));
    EXPECT_EQ(alone["kv_transfer_params"], Json::parse(R"({"ret_first_tok":true})"));
}

TEST(LmcacheBodies, DecodeContinuesAfterPsToken) {
    Scanned s(R"({"model":"m","prompt":"a b","max_tokens":10,"min_tokens":3,"stream":true,
                 "stream_options":{"include_usage":true},"seed":1,"kv_transfer_params":{}})");
    const Json d = Json::parse(make_decode_body(s.view, ask_of(s, Api::Completions), {1, 2}, 99));
    EXPECT_EQ(d["prompt"], Json::parse("[1,2,99]"));
    EXPECT_EQ(d["max_tokens"], 9);
    EXPECT_EQ(d["min_tokens"], 2);
    EXPECT_EQ(d["stream"], true);
    EXPECT_EQ(d["stream_options"]["include_usage"], true);
    EXPECT_EQ(d["seed"], 1);
    EXPECT_FALSE(d.contains("kv_transfer_params"));

    Scanned chat(R"({"messages":[{"role":"user","content":"x"}],"max_completion_tokens":4})");
    const Json c = Json::parse(make_decode_body(chat.view, ask_of(chat, Api::Chat), {3}, 4));
    EXPECT_EQ(c["max_tokens"], 3);
    EXPECT_FALSE(c.contains("messages"));
    EXPECT_FALSE(c.contains("max_completion_tokens"));
    Scanned open(R"({"prompt":"x"})");
    EXPECT_FALSE(Json::parse(make_decode_body(open.view, ask_of(open, Api::Completions), {3}, 4))
                     .contains("max_tokens"));
}

TEST(LmcacheFirstToken, NeedsFirstTok) {
    FirstToken f;
    std::string why;
    EXPECT_TRUE(parse_first_token(
        R"({"model":"m","choices":[{"text":"Hello ","finish_reason":"length"}],
            "kv_transfer_params":{"first_tok":42}})",
        f, why));
    EXPECT_EQ(f.id, 42);
    EXPECT_EQ(f.text, "Hello ");
    EXPECT_EQ(f.finish_reason, "length");
    EXPECT_EQ(f.model, "m");
    EXPECT_FALSE(parse_first_token(R"({"choices":[{"text":"x"}]})", f, why));
    EXPECT_FALSE(
        parse_first_token(R"({"choices":[],"kv_transfer_params":{"first_tok":1}})", f, why));
    EXPECT_FALSE(
        parse_first_token(R"({"choices":[{}],"kv_transfer_params":{"first_tok":"1"}})", f, why));
}

FirstToken first_token() {
    FirstToken f;
    f.id = 42;
    f.text = "Hello ";
    f.finish_reason = "length";
    f.model = "m";
    return f;
}

// The data payloads of an SSE text, in order.
std::vector<std::string> data_of(std::string_view events) {
    std::vector<std::string> out;
    std::size_t pos = 0;
    while ((pos = events.find("data: ", pos)) != std::string_view::npos) {
        const std::size_t end = events.find("\n\n", pos);
        out.emplace_back(events.substr(pos + 6, end - pos - 6));
        pos = end;
    }
    return out;
}

TEST(LmcacheAnswer, WholeCompletionStartsWithPsTokenAndCountsItInUsage) {
    Scanned s(R"({"prompt":"a b c","max_tokens":3})");
    AnswerShaper shaper(ask_of(s, Api::Completions), "rid", first_token(), 3, 1700);
    std::string out;
    ASSERT_TRUE(shaper.whole(
        R"({"id":"cmpl-d","object":"text_completion","model":"m","choices":[{"index":0,
            "text":"world again","finish_reason":"length"}],
            "usage":{"prompt_tokens":4,"completion_tokens":2,"total_tokens":6}})",
        out));
    const Json j = Json::parse(out);
    EXPECT_EQ(j["choices"][0]["text"], "Hello world again");
    EXPECT_EQ(j["usage"], Json::parse(R"({"prompt_tokens":3,"completion_tokens":3,
                                          "total_tokens":6})"));
    EXPECT_FALSE(shaper.whole("[1]", out));
    EXPECT_FALSE(shaper.whole(R"({"choices":[]})", out));
}

TEST(LmcacheAnswer, WholeChatIsAChatCompletion) {
    Scanned s(R"({"messages":[{"role":"user","content":"x"}]})");
    AnswerShaper shaper(ask_of(s, Api::Chat), "rid", first_token(), 5, 1700);
    std::string out;
    ASSERT_TRUE(shaper.whole(R"({"model":"m","choices":[{"text":"there","finish_reason":"stop"}],
                                 "usage":{"prompt_tokens":6,"completion_tokens":1}})",
                             out));
    const Json j = Json::parse(out);
    EXPECT_EQ(j["object"], "chat.completion");
    EXPECT_EQ(j["id"], "chatcmpl-rid");
    EXPECT_EQ(j["created"], 1700);
    EXPECT_EQ(j["choices"][0]["message"],
              Json::parse(R"({"role":"assistant","content":"Hello there"})"));
    EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
    EXPECT_EQ(j["usage"]["prompt_tokens"], 5);
    EXPECT_EQ(j["usage"]["completion_tokens"], 2);
    EXPECT_EQ(j["usage"]["total_tokens"], 7);
}

TEST(LmcacheAnswer, ChatStreamHasRoleThenPsTokenThenDsChunksUnderOneId) {
    Scanned s(R"({"messages":[],"stream":true,"stream_options":{"include_usage":true}})");
    AnswerShaper shaper(ask_of(s, Api::Chat, true), "rid", first_token(), 5, 1700);
    const std::vector<std::string> start = data_of(shaper.stream_start());
    ASSERT_EQ(start.size(), 2u);
    EXPECT_EQ(Json::parse(start[0])["choices"][0]["delta"],
              Json::parse(R"({"role":"assistant","content":""})"));
    EXPECT_EQ(Json::parse(start[1])["choices"][0]["delta"]["content"], "Hello ");
    std::string out;
    ASSERT_TRUE(shaper.stream_events(
        "data: {\"id\":\"cmpl-d\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,"
        "\"text\":\"there\",\"finish_reason\":null}]}\n\n"
        "data: {\"id\":\"cmpl-d\",\"model\":\"m\",\"choices\":[{\"index\":0,\"text\":\"\","
        "\"finish_reason\":\"length\"}]}\r\n\r\n"
        "data: {\"id\":\"cmpl-d\",\"choices\":[],\"usage\":{\"prompt_tokens\":6,"
        "\"completion_tokens\":2,\"total_tokens\":8}}\n\n"
        "data: [DONE]\n\n",
        out));
    const std::vector<std::string> d = data_of(out);
    ASSERT_EQ(d.size(), 4u);
    const Json c0 = Json::parse(d[0]), c1 = Json::parse(d[1]), u = Json::parse(d[2]);
    for (const Json* c : {&c0, &c1, &u}) {
        EXPECT_EQ((*c)["id"], "chatcmpl-rid");
        EXPECT_EQ((*c)["created"], 1700);
        EXPECT_EQ((*c)["object"], "chat.completion.chunk");
    }
    EXPECT_EQ(c0["choices"][0]["delta"]["content"], "there");
    EXPECT_EQ(c1["choices"][0]["delta"], Json::object());
    EXPECT_EQ(c1["choices"][0]["finish_reason"], "length");
    EXPECT_EQ(u["usage"], Json::parse(R"({"prompt_tokens":5,"completion_tokens":3,
                                          "total_tokens":8})"));
    EXPECT_EQ(d[3], "[DONE]");
    EXPECT_FALSE(shaper.stream_events("data: not json\n\n", out));
    ASSERT_TRUE(shaper.stream_events("data: {\"error\":{\"message\":\"x\"}}\n\n", out));
    EXPECT_EQ(out, "data: {\"error\":{\"message\":\"x\"}}\n\n");  // D's error event as it is
}

TEST(LmcacheAnswer, AChatChunkWhoseIndexIsNotANumberGetsIndexZero) {
    // Found by the sse fuzzer: "index": null (or a string, a list) threw from json::value().
    Scanned s(R"({"messages":[],"stream":true})");
    AnswerShaper shaper(ask_of(s, Api::Chat, true), "rid", first_token(), 5, 1700);
    shaper.stream_start();
    for (const char* index : {"null", "\"1\"", "[1]", "{}", "true", "2"}) {
        std::string out;
        ASSERT_TRUE(shaper.stream_events(std::string("data: {\"id\":\"cmpl-d\",\"choices\":[{"
                                                     "\"index\":") +
                                             index + ",\"text\":\"x\"}]}\n\n",
                                         out))
            << index;
        const std::vector<std::string> d = data_of(out);
        ASSERT_EQ(d.size(), 1u) << out;
        EXPECT_EQ(Json::parse(d[0])["choices"][0]["index"], std::string(index) == "2" ? 2 : 0)
            << index;
    }
}

TEST(LmcacheAnswer, FirstOnlyAnswersCarryPsTokenAlone) {
    Scanned s(R"({"prompt":"x","max_tokens":1,"stream":true,
                 "stream_options":{"include_usage":true}})");
    AnswerShaper shaper(ask_of(s, Api::Completions, true), "rid", first_token(), 1, 1700);
    const Json w = Json::parse(shaper.first_only_whole());
    EXPECT_EQ(w["choices"][0]["text"], "Hello ");
    EXPECT_EQ(w["choices"][0]["finish_reason"], "length");
    EXPECT_EQ(w["usage"]["completion_tokens"], 1);
    const std::vector<std::string> d = data_of(shaper.first_only_stream());
    ASSERT_EQ(d.size(), 4u);
    EXPECT_EQ(Json::parse(d[0])["choices"][0]["text"], "Hello ");
    EXPECT_EQ(Json::parse(d[1])["choices"][0]["finish_reason"], "length");
    EXPECT_EQ(Json::parse(d[2])["usage"]["total_tokens"], 2);
    EXPECT_EQ(d[3], "[DONE]");
}

}  // namespace
}  // namespace pdr::disagg::lmcache
