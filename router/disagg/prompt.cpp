#include "router/disagg/prompt.hpp"

#include <algorithm>

namespace pdr::disagg {

namespace {

// A flat list of numbers ("[1, 2, 3]"): how many; false when it holds anything else.
bool count_token_ids(std::string_view list, std::size_t& n) noexcept {
    n = 0;
    bool in_number = false;
    for (char c : list.substr(1, list.size() - 2)) {
        if ((c >= '0' && c <= '9') || c == '-') {
            n += in_number ? 0 : 1;
            in_number = true;
        } else if (c == ',' || c == ' ' || c == '\t' || c == '\n' || c == '\r') {
            in_number = false;
        } else {
            return false;
        }
    }
    return true;
}

}  // namespace

PromptSize measure_prompt(const JsonObjectView& body) noexcept {
    PromptSize p;
    const JsonMember* m = body.find("prompt");
    if (m == nullptr) {
        m = body.find("messages");
    }
    if (m == nullptr) {
        return p;
    }
    p.text = m->value;
    if (m->kind == JsonKind::String && p.text.size() >= 2) {
        p.text = p.text.substr(1, p.text.size() - 2);
    } else if (m->kind == JsonKind::Array && m->key == "prompt" && p.text.size() >= 2) {
        std::size_t n = 0;
        if (count_token_ids(p.text, n) && n > 0) {
            p.token_ids = true;
            p.tokens = n;
        }
    }
    p.chars = p.text.size();
    return p;
}

bool is_short_prompt(const PromptSize& p, const config::Config& cfg) noexcept {
    if (p.token_ids) {
        return cfg.disagg_min_prompt_tokens > 0 && p.tokens < cfg.disagg_min_prompt_tokens;
    }
    return cfg.disagg_min_prompt_chars > 0 && p.chars < cfg.disagg_min_prompt_chars;
}

instances::PickHint prefill_hint(const PromptSize& p, const config::Config& cfg) noexcept {
    instances::PickHint hint;
    hint.weight = std::max<std::size_t>(1, p.token_ids ? p.tokens : p.chars);
    hint.key = p.text.substr(0, std::min(p.text.size(), cfg.prefix_affinity_chars));
    return hint;
}

}  // namespace pdr::disagg
