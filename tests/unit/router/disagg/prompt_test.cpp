// Prompt length, the short-prompt rule and the prefill policy's hint.
#include <gtest/gtest.h>

#include <string>

#include "router/disagg/prompt.hpp"

namespace pdr::disagg {
namespace {

struct Scanned {
    explicit Scanned(std::string t) : text(std::move(t)) {
        EXPECT_EQ(view.scan(text), JsonScanStatus::Ok) << text;
    }
    std::string text;
    JsonObjectView view;
};

TEST(PromptTest, MeasuresTextChatAndTokenIds) {
    Scanned text(R"({"model":"m","prompt":"hello world","max_tokens":3})");
    PromptSize p = measure_prompt(text.view);
    EXPECT_EQ(p.chars, 11u);
    EXPECT_FALSE(p.token_ids);
    EXPECT_EQ(p.text, "hello world");

    Scanned chat(R"({"messages":[{"role":"user","content":"hi"}]})");
    p = measure_prompt(chat.view);
    EXPECT_EQ(p.text, R"([{"role":"user","content":"hi"}])");
    EXPECT_FALSE(p.token_ids);

    Scanned ids(R"({"prompt":[ 1, 22,333 ,-4]})");
    p = measure_prompt(ids.view);
    EXPECT_TRUE(p.token_ids);
    EXPECT_EQ(p.tokens, 4u);

    Scanned batch(R"({"prompt":["a","b"]})");
    p = measure_prompt(batch.view);
    EXPECT_FALSE(p.token_ids);
    EXPECT_EQ(p.chars, 9u);

    Scanned none(R"({"model":"m"})");
    EXPECT_EQ(measure_prompt(none.view).chars, 0u);
}

TEST(PromptTest, ShortPromptRuleAndHint) {
    config::Config cfg;
    Scanned text(R"({"prompt":"0123456789"})");
    Scanned ids(R"({"prompt":[1,2,3]})");
    const PromptSize t = measure_prompt(text.view), i = measure_prompt(ids.view);
    EXPECT_FALSE(is_short_prompt(t, cfg));  // off by default
    EXPECT_FALSE(is_short_prompt(i, cfg));
    cfg.disagg_min_prompt_chars = 11;
    EXPECT_TRUE(is_short_prompt(t, cfg));
    EXPECT_FALSE(is_short_prompt(i, cfg));  // token ids follow the token setting
    cfg.disagg_min_prompt_chars = 10;
    EXPECT_FALSE(is_short_prompt(t, cfg));
    cfg.disagg_min_prompt_tokens = 4;
    EXPECT_TRUE(is_short_prompt(i, cfg));
    cfg.disagg_min_prompt_tokens = 3;
    EXPECT_FALSE(is_short_prompt(i, cfg));

    cfg.prefix_affinity_chars = 4;
    const instances::PickHint h = prefill_hint(t, cfg);
    EXPECT_EQ(h.weight, 10u);
    EXPECT_EQ(h.key, "0123");
    EXPECT_EQ(prefill_hint(i, cfg).weight, 3u);
    EXPECT_EQ(prefill_hint(PromptSize{}, cfg).weight, 1u);
}

}  // namespace
}  // namespace pdr::disagg
