#pragma once
// Deterministic text generation for pdsim. The generated text depends only on (prompt,
// max_tokens): token i is a word of a fixed vocabulary picked by a stable hash of the prompt and
// i, followed by one space, so the concatenation of streamed deltas equals the non-stream text.
#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace pdr::sim {

inline constexpr int kMaxModelLen = 8192;
inline constexpr int kDefaultMaxTokens = 16;

// 64-bit FNV-1a.
std::uint64_t fnv1a64(std::string_view data, std::uint64_t seed = 0xcbf29ce484222325ULL) noexcept;

// The text of generated token `i` (0-based) for `prompt`, e.g. "river ".
std::string token_text(std::string_view prompt, int i);
// The concatenation of token_text(prompt, 0 .. max_tokens-1).
std::string generate_text(std::string_view prompt, int max_tokens);

// Number of whitespace-separated words in `prompt`, at least 1 (the emulated prompt_tokens).
int count_prompt_tokens(std::string_view prompt);
// Emulated token ids of `prompt`: one id per word (stable hash), at least one id.
std::vector<std::int64_t> tokenize(std::string_view prompt);

// The prompt string of a chat request: the text of every message content, joined by "\n".
// `content` may be a string or a list of parts ({"type":"text","text":...}); other parts are
// skipped. Returns false (and sets `error`) when `messages` is not a non-empty list of objects.
bool chat_prompt(const nlohmann::json& messages, std::string& out, std::string& error);

}  // namespace pdr::sim
