#pragma once
// How long a client's prompt is, as the selection policies and selective disaggregation see it,
// without a tokenizer: a text prompt (or a chat's messages) in characters of its JSON text, a
// prompt of token ids in tokens.
#include <cstddef>
#include <string_view>

#include "config/config.hpp"
#include "net/common/json_scan.hpp"
#include "router/instances/policy.hpp"

namespace pdr::disagg {

struct PromptSize {
    std::size_t chars = 0;   // the prompt's JSON text (a string without its quotes)
    std::size_t tokens = 0;  // token_ids: how many
    bool token_ids = false;  // "prompt" is a flat list of token ids
    std::string_view text;   // the prompt's JSON text, as written (views into the body)
};

// "prompt" (completions) or "messages" (chat) of a validated body; all zero when neither.
PromptSize measure_prompt(const JsonObjectView& body) noexcept;

// --disagg-min-prompt-chars / --disagg-min-prompt-tokens: this prompt skips the prefill.
bool is_short_prompt(const PromptSize& p, const config::Config& cfg) noexcept;

// The prefill policy's view: weight = the prompt's length, key = its first
// cfg.prefix_affinity_chars characters.
instances::PickHint prefill_hint(const PromptSize& p, const config::Config& cfg) noexcept;

}  // namespace pdr::disagg
