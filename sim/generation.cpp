#include "sim/generation.hpp"

#include <nlohmann/json.hpp>

#include <array>

namespace pdr::sim {

namespace {

constexpr std::array<std::string_view, 64> kVocab{
    "the",    "river",  "stone",    "light",  "quiet",   "market",  "window",  "engine",
    "garden", "signal", "paper",    "orange", "valley",  "copper",  "winter",  "harbor",
    "bridge", "forest", "silver",   "thread", "cloud",   "meadow",  "lantern", "pepper",
    "rocket", "spiral", "candle",   "island", "marble",  "violet",  "anchor",  "basket",
    "canyon", "desert", "ember",    "falcon", "glacier", "hollow",  "ivory",   "jasmine",
    "kettle", "ladder", "mirror",   "needle", "oasis",   "pillow",  "quartz",  "ribbon",
    "saddle", "tunnel", "umbrella", "velvet", "walnut",  "yonder",  "zephyr",  "amber",
    "beacon", "cobalt", "dune",     "echo",   "fable",   "granite", "harvest", "indigo",
};

constexpr std::uint64_t kFnvOffset = 0xcbf29ce484222325ULL;

// FNV-1a over the 8 little-endian bytes of `id`.
std::uint64_t fnv1a_id(std::uint64_t h, TokenId id) noexcept {
    auto v = static_cast<std::uint64_t>(id);
    for (int i = 0; i < 8; ++i) {
        h ^= (v >> (8 * i)) & 0xff;
        h *= 0x100000001b3ULL;
    }
    return h;
}

bool is_space(char c) noexcept {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

template <class Fn>
void for_each_word(std::string_view s, Fn&& fn) {
    std::size_t i = 0;
    while (i < s.size()) {
        while (i < s.size() && is_space(s[i])) {
            ++i;
        }
        std::size_t start = i;
        while (i < s.size() && !is_space(s[i])) {
            ++i;
        }
        if (i > start) {
            fn(s.substr(start, i - start));
        }
    }
}

}  // namespace

std::uint64_t mix64(std::uint64_t x) noexcept {
    // splitmix64 finaliser
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

std::uint64_t fnv1a64(std::string_view data, std::uint64_t seed) noexcept {
    std::uint64_t h = seed;
    for (unsigned char c : data) {
        h ^= c;
        h *= 0x100000001b3ULL;
    }
    return h;
}

TokenStream::TokenStream(std::span<const TokenId> prompt) noexcept : state_(kFnvOffset) {
    for (TokenId id : prompt) {
        feed(id);
    }
}

void TokenStream::feed(TokenId id) noexcept {
    state_ = fnv1a_id(state_, id);
}

TokenId TokenStream::next() noexcept {
    const TokenId id = kFirstGeneratedId + static_cast<TokenId>(mix64(state_) % kVocab.size());
    feed(id);
    return id;
}

std::uint64_t hash_ids(std::span<const TokenId> ids) noexcept {
    std::uint64_t h = kFnvOffset;
    for (TokenId id : ids) {
        h = fnv1a_id(h, id);
    }
    return mix64(h ^ ids.size());
}

std::string id_text(TokenId id) {
    std::string out;
    if (id >= kFirstGeneratedId && id < kFirstGeneratedId + static_cast<TokenId>(kVocab.size())) {
        out = kVocab[static_cast<std::size_t>(id - kFirstGeneratedId)];
    } else {
        out = std::to_string(id);
    }
    out.push_back(' ');
    return out;
}

std::vector<TokenId> generate_ids(std::span<const TokenId> prompt, int n) {
    std::vector<TokenId> out;
    TokenStream gen(prompt);
    for (int i = 0; i < n; ++i) {
        out.push_back(gen.next());
    }
    return out;
}

std::string generate_text(std::span<const TokenId> prompt, int n) {
    std::string out;
    TokenStream gen(prompt);
    for (int i = 0; i < n; ++i) {
        out += id_text(gen.next());
    }
    return out;
}

std::string token_text(std::string_view prompt, int i) {
    const auto ids = generate_ids(tokenize(prompt), i + 1);
    return id_text(ids.back());
}

std::string generate_text(std::string_view prompt, int max_tokens) {
    return generate_text(tokenize(prompt), max_tokens);
}

int count_prompt_tokens(std::string_view prompt) {
    int n = 0;
    for_each_word(prompt, [&](std::string_view) { ++n; });
    return n < 1 ? 1 : n;
}

std::vector<TokenId> tokenize(std::string_view prompt) {
    std::vector<TokenId> ids;
    for_each_word(prompt, [&](std::string_view w) {
        ids.push_back(kFirstWordId + static_cast<TokenId>(fnv1a64(w) % kWordIds));
    });
    if (ids.empty()) {
        ids.push_back(1);  // a lone BOS-like token, so the count matches count_prompt_tokens
    }
    return ids;
}

bool chat_prompt(const nlohmann::json& messages, std::string& out, std::string& error) {
    out.clear();
    if (!messages.is_array() || messages.empty()) {
        error = "'messages' must be a non-empty list";
        return false;
    }
    bool first = true;
    for (const auto& m : messages) {
        if (!m.is_object()) {
            error = "each message must be an object";
            return false;
        }
        auto content = m.find("content");
        std::string text;
        if (content == m.end() || content->is_null()) {
            // assistant tool-call messages may carry no content
        } else if (content->is_string()) {
            text = content->get<std::string>();
        } else if (content->is_array()) {
            for (const auto& part : *content) {
                if (part.is_object() && part.value("type", "") == "text" && part.contains("text") &&
                    part["text"].is_string()) {
                    text += part["text"].get<std::string>();
                }
            }
        } else {
            error = "message 'content' must be a string or a list of parts";
            return false;
        }
        if (!first) {
            out.push_back('\n');
        }
        out += text;
        first = false;
    }
    return true;
}

}  // namespace pdr::sim
