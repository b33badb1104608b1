#pragma once
// Deterministic, autoregressive text generation for pdsim. A prompt is a list of token ids (a
// text prompt is tokenized first: one id per word). The next token id is a stable hash of the
// whole id sequence so far, mapped onto a fixed 64-word vocabulary; the text of a generated id
// is its word followed by one space. So the output depends only on (prompt ids, max_tokens), the
// concatenation of streamed deltas equals the non-stream text, and a generation can be split
// anywhere: the first token from (ids, 1) followed by the continuation from (ids + [first],
// n - 1) is the answer to (ids, n). That is what a prefill/decode pair relies on (LMCache mode:
// P answers the first token id, D continues from the ids plus that token).
#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace pdr::sim {

inline constexpr int kMaxModelLen = 8192;
inline constexpr int kDefaultMaxTokens = 16;

using TokenId = std::int64_t;
// Ids 0..99 are "special" (1 stands for the lone BOS of an empty prompt); a prompt word maps into
// [kFirstWordId, kFirstWordId + kWordIds); generated tokens are [kFirstGeneratedId, + 64).
// Every id a client may send is in [0, kMaxTokenId]: exactly representable in a JSON double.
inline constexpr TokenId kFirstWordId = 100;
inline constexpr TokenId kWordIds = 50000;
inline constexpr TokenId kFirstGeneratedId = kFirstWordId + kWordIds;
inline constexpr TokenId kMaxTokenId = (TokenId{1} << 31) - 1;

// 64-bit FNV-1a.
std::uint64_t fnv1a64(std::string_view data, std::uint64_t seed = 0xcbf29ce484222325ULL) noexcept;
// The splitmix64 finaliser: a 64-bit mixing function.
std::uint64_t mix64(std::uint64_t x) noexcept;

// The generator: fed the prompt ids, then each token it produced.
class TokenStream {
public:
    explicit TokenStream(std::span<const TokenId> prompt) noexcept;
    // The next token id (appended to the sequence the following one is computed from).
    TokenId next() noexcept;

private:
    void feed(TokenId id) noexcept;
    std::uint64_t state_;
};

// A stable 64-bit hash of a whole id sequence (the key of the KV computed for it).
std::uint64_t hash_ids(std::span<const TokenId> ids) noexcept;

// The text of one token id: a generated id's vocabulary word plus a space ("river "); any other
// id renders as "<id> ".
std::string id_text(TokenId id);
// The first `n` generated ids for `prompt`.
std::vector<TokenId> generate_ids(std::span<const TokenId> prompt, int n);
// The text of generate_ids(prompt, n), concatenated.
std::string generate_text(std::span<const TokenId> prompt, int n);

// The same for a text prompt (tokenized first): token_text(prompt, i) is generated token `i`
// (0-based), generate_text(prompt, n) the concatenation of tokens 0 .. n-1.
std::string token_text(std::string_view prompt, int i);
std::string generate_text(std::string_view prompt, int max_tokens);

// Number of whitespace-separated words in `prompt`, at least 1 (the emulated prompt_tokens).
int count_prompt_tokens(std::string_view prompt);
// Emulated token ids of `prompt`: one id per word (stable hash into the word range), at least
// one id.
std::vector<TokenId> tokenize(std::string_view prompt);

// The prompt string of a chat request: the text of every message content, joined by "\n".
// `content` may be a string or a list of parts ({"type":"text","text":...}); other parts are
// skipped. Returns false (and sets `error`) when `messages` is not a non-empty list of objects.
bool chat_prompt(const nlohmann::json& messages, std::string& out, std::string& error);

}  // namespace pdr::sim
