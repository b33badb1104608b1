#include "sim/generation.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <set>

namespace pdr::sim {
namespace {

TEST(Generation, TokenTextIsDeterministicWordPlusSpace) {
    for (int i = 0; i < 50; ++i) {
        const std::string t = token_text("hello world", i);
        EXPECT_EQ(t, token_text("hello world", i));
        ASSERT_GE(t.size(), 2u);
        EXPECT_EQ(t.back(), ' ');
        EXPECT_EQ(t.find(' '), t.size() - 1) << "one word per token: '" << t << "'";
    }
}

TEST(Generation, GenerateTextIsConcatenationOfTokens) {
    const std::string prompt = "The quick brown fox";
    std::string joined;
    for (int i = 0; i < 20; ++i) {
        joined += token_text(prompt, i);
    }
    EXPECT_EQ(generate_text(prompt, 20), joined);
    EXPECT_EQ(generate_text(prompt, 0), "");
    // A prefix of a longer generation: max_tokens only cuts the sequence.
    EXPECT_EQ(generate_text(prompt, 20).rfind(generate_text(prompt, 7), 0), 0u);
}

TEST(Generation, DependsOnPromptAndPosition) {
    // Different prompts give different sequences (not word-for-word equal over 16 tokens).
    EXPECT_NE(generate_text("prompt one", 16), generate_text("prompt two", 16));
    // The sequence is not a single repeated word.
    std::set<std::string> distinct;
    for (int i = 0; i < 32; ++i) {
        distinct.insert(token_text("abc", i));
    }
    EXPECT_GT(distinct.size(), 8u);
}

TEST(Generation, Fnv1aKnownValues) {
    // Published FNV-1a 64 test vectors.
    EXPECT_EQ(fnv1a64(""), 0xcbf29ce484222325ULL);
    EXPECT_EQ(fnv1a64("a"), 0xaf63dc4c8601ec8cULL);
    EXPECT_EQ(fnv1a64("foobar"), 0x85944171f73967e8ULL);
}

TEST(Generation, PromptTokensCountWordsWithMinimumOne) {
    EXPECT_EQ(count_prompt_tokens(""), 1);
    EXPECT_EQ(count_prompt_tokens("   \n\t "), 1);
    EXPECT_EQ(count_prompt_tokens("one"), 1);
    EXPECT_EQ(count_prompt_tokens("  one two\tthree\nfour  "), 4);
}

TEST(Generation, TokenizeMatchesCount) {
    const std::string p = "a b c a";
    auto ids = tokenize(p);
    ASSERT_EQ(static_cast<int>(ids.size()), count_prompt_tokens(p));
    EXPECT_EQ(ids[0], ids[3]);  // same word, same id
    EXPECT_NE(ids[0], ids[1]);
    for (auto id : ids) {
        EXPECT_GE(id, 100);
    }
    EXPECT_EQ(tokenize("").size(), 1u);
}

TEST(Generation, ChatPromptJoinsContents) {
    auto msgs = nlohmann::json::parse(R"([
        {"role":"system","content":"be brief"},
        {"role":"user","content":[{"type":"text","text":"hi "},{"type":"image_url"},
                                  {"type":"text","text":"there"}]},
        {"role":"assistant","content":null}])");
    std::string out;
    std::string err;
    ASSERT_TRUE(chat_prompt(msgs, out, err)) << err;
    EXPECT_EQ(out, "be brief\nhi there\n");
}

TEST(Generation, ChatPromptRejectsBadMessages) {
    std::string out;
    std::string err;
    EXPECT_FALSE(chat_prompt(nlohmann::json::array(), out, err));
    EXPECT_FALSE(chat_prompt(nlohmann::json("text"), out, err));
    EXPECT_FALSE(chat_prompt(nlohmann::json::parse(R"([1])"), out, err));
    EXPECT_FALSE(chat_prompt(nlohmann::json::parse(R"([{"role":"user","content":5}])"), out, err));
    EXPECT_FALSE(err.empty());
}

}  // namespace
}  // namespace pdr::sim
