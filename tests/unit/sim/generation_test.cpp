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
        EXPECT_GE(id, kFirstWordId);
        EXPECT_LT(id, kFirstWordId + kWordIds);
    }
    EXPECT_EQ(tokenize("").size(), 1u);
}

// The rule a prefill/decode pair relies on: P's first token (ids, 1) followed by D's
// continuation (ids + [first], n - 1) is the single-engine answer (ids, n), for every n.
TEST(Generation, SplitAfterFirstTokenEqualsSingleAnswer) {
    for (const std::string prompt : {"The quick brown fox", "", "one", "a b c d e f g h i j"}) {
        const auto ids = tokenize(prompt);
        for (int n : {1, 2, 5, 16}) {
            const auto single = generate_ids(ids, n);
            ASSERT_EQ(static_cast<int>(single.size()), n);
            const TokenId first = generate_ids(ids, 1).front();
            EXPECT_EQ(first, single[0]);
            auto with_first = ids;
            with_first.push_back(first);
            const std::string split = id_text(first) + generate_text(with_first, n - 1);
            EXPECT_EQ(split, generate_text(prompt, n)) << prompt << " n=" << n;
        }
    }
}

// The same through a chat prompt: messages -> chat_prompt text -> tokenize.
TEST(Generation, ChatSplitEqualsSingleAnswer) {
    auto msgs = nlohmann::json::parse(
        R"([{"role":"system","content":"be brief"},{"role":"user","content":"tell me"}])");
    std::string text;
    std::string err;
    ASSERT_TRUE(chat_prompt(msgs, text, err)) << err;
    auto ids = tokenize(text);
    const TokenId first = generate_ids(ids, 1).front();
    ids.push_back(first);
    EXPECT_EQ(id_text(first) + generate_text(ids, 7), generate_text(text, 8));
}

TEST(Generation, AutoregressiveOnIds) {
    const std::vector<TokenId> ids{5, 6, 7};
    // The next token depends on the whole sequence: each prefix gives the next token.
    const auto out = generate_ids(ids, 4);
    for (std::size_t i = 0; i < out.size(); ++i) {
        std::vector<TokenId> prefix = ids;
        prefix.insert(prefix.end(), out.begin(), out.begin() + static_cast<std::ptrdiff_t>(i));
        EXPECT_EQ(generate_ids(prefix, 1).front(), out[i]) << i;
    }
    EXPECT_NE(generate_ids(std::vector<TokenId>{5, 6, 8}, 8), generate_ids(ids, 8));
    EXPECT_NE(generate_ids(std::vector<TokenId>{6, 5, 7}, 8), generate_ids(ids, 8));
    for (TokenId id : generate_ids(ids, 64)) {
        EXPECT_GE(id, kFirstGeneratedId);
        EXPECT_LT(id, kFirstGeneratedId + 64);
        EXPECT_EQ(id_text(id).back(), ' ');
    }
    EXPECT_EQ(id_text(7), "7 ");
}

TEST(Generation, HashIdsSeparatesSequences) {
    const std::vector<TokenId> a{1, 2, 3};
    EXPECT_EQ(hash_ids(a), hash_ids(std::vector<TokenId>{1, 2, 3}));
    EXPECT_NE(hash_ids(a), hash_ids(std::vector<TokenId>{1, 2}));
    EXPECT_NE(hash_ids(a), hash_ids(std::vector<TokenId>{3, 2, 1}));
    EXPECT_NE(hash_ids(std::vector<TokenId>{}), hash_ids(std::vector<TokenId>{0}));
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
