#pragma once
// The texts JsonObjectView is checked on against nlohmann (json_scan_test.cpp), shared with
// bench/libs/json_scan_vs_simdjson.cpp so that both judge a scanner on the same inputs.
#include <cstddef>
#include <random>
#include <string>
#include <vector>

namespace pdr::test {

inline const std::vector<std::string>& json_scan_corpus() {
    static const std::vector<std::string> texts = {
        "",
        " ",
        "{}",
        " { } ",
        "[]",
        "1",
        "\"s\"",
        "null",
        "true",
        "{\"a\":1}",
        "{\"a\":1,}",
        "{\"a\" 1}",
        "{\"a\":}",
        "{a:1}",
        "{\"a\":1}}",
        "{\"a\":1} x",
        "{\"a\":[1,2,{\"b\":null}],\"c\":{\"d\":[]}}",
        "{\"a\":[1,2,]}",
        "{\"a\":-0}",
        "{\"a\":-}",
        "{\"a\":01}",
        "{\"a\":1.}",
        "{\"a\":.5}",
        "{\"a\":1.5e10}",
        "{\"a\":1e}",
        "{\"a\":1E+2}",
        "{\"a\":1e400}",
        "{\"a\":-1e400}",
        "{\"a\":1e-400}",
        "{\"a\":18446744073709551616}",
        "{\"a\":tru}",
        "{\"a\":truex}",
        "{\"a\":nul}",
        "{\"a\":\"\\u00e9\\n\\t\\\"\\\\\\/\"}",
        "{\"a\":\"\\x\"}",
        "{\"a\":\"\\u12\"}",
        "{\"a\":\"\\ud83d\\ude00\"}",
        "{\"a\":\"\\ud83d\"}",
        "{\"a\":\"\\ude00\"}",
        "{\"a\":\"\\ud83d\\u0041\"}",
        "{\"a\":\"tab\there\"}",
        "{\"a\":\"\xc3\xa9\"}",
        "{\"a\":\"\xc3\"}",
        "{\"a\":\"\xc0\xaf\"}",
        "{\"a\":\"\xe0\x80\x80\"}",
        "{\"a\":\"\xed\xa0\x80\"}",
        "{\"a\":\"\xf0\x9f\x98\x80\"}",
        "{\"a\":\"\xf4\x90\x80\x80\"}",
        "{\"a\":\"\xff\"}",
        "\xEF\xBB\xBF{\"a\":1}",
        "\xEF\xBB{\"a\":1}",
        "{\"a\":1,\"a\":2}",
        "{\"\\u0061\":1,\"a\":2}",
        "{\"model\":\"m\",\"prompt\":\"p\",\"stream\":true,\"max_tokens\":5}",
        "\t{\r\n\"k\" : [ 1 , { \"x\" : \"y\" } ] }\n",
        "{\"a\":\"unterminated}",
        "{\"a\":[}",
        "{\"a\":{]}",
    };
    return texts;
}

// A corpus text with one to three random one-byte edits (insert, replace or delete), drawn from
// `rng`: the same sequence for the same seed.
inline std::string mutated_json_scan_text(std::mt19937& rng) {
    const std::string alphabet = "{}[]\":,.-+eE0123456789 \\u\t\nabcdefnrtl\xc3\xa9\xed\xf0";
    std::string text = json_scan_corpus()[rng() % json_scan_corpus().size()];
    const std::size_t edits = 1 + rng() % 3;
    for (std::size_t e = 0; e < edits; ++e) {
        const std::size_t at = text.empty() ? 0 : rng() % (text.size() + 1);
        const char c = alphabet[rng() % alphabet.size()];
        switch (rng() % 3) {
            case 0:
                text.insert(text.begin() + static_cast<std::ptrdiff_t>(at), c);
                break;
            case 1:
                if (at < text.size()) {
                    text[at] = c;
                }
                break;
            default:
                if (at < text.size()) {
                    text.erase(at, 1);
                }
                break;
        }
    }
    return text;
}

}  // namespace pdr::test
