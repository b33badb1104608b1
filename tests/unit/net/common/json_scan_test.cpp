// JsonObjectView: its verdicts are nlohmann's (checked differentially on a fixed corpus and on
// seeded random mutations of it), and rewrite() has JSON-object semantics.
#include "net/common/json_scan.hpp"

#include "tests/unit/net/common/json_scan_corpus.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <random>
#include <string>
#include <vector>

namespace pdr {
namespace {

using Ordered = nlohmann::ordered_json;

// What nlohmann says: NotJson, NotObject or Ok.
JsonScanStatus nlohmann_verdict(std::string_view text) {
    Ordered j = Ordered::parse(text, nullptr, false);
    if (j.is_discarded()) {
        return JsonScanStatus::NotJson;
    }
    return j.is_object() ? JsonScanStatus::Ok : JsonScanStatus::NotObject;
}

const std::vector<std::string>& corpus() {
    return test::json_scan_corpus();
}

TEST(JsonScan, VerdictsMatchNlohmannOnTheCorpus) {
    for (const std::string& text : corpus()) {
        JsonObjectView v;
        EXPECT_EQ(v.scan(text), nlohmann_verdict(text)) << "text: " << text;
    }
}

TEST(JsonScan, VerdictsMatchNlohmannOnRandomMutations) {
    // Fixed seed, bounded count: flip, insert or delete bytes of a corpus text.
    std::mt19937 rng(12345);
    std::size_t checked = 0;
    for (int round = 0; round < 20000; ++round) {
        const std::string text = test::mutated_json_scan_text(rng);
        JsonObjectView v;
        ASSERT_EQ(v.scan(text), nlohmann_verdict(text)) << "text: " << text;
        ++checked;
    }
    EXPECT_EQ(checked, 20000u);
}

TEST(JsonScan, EveryByteKindAtEveryPositionOfAStringMatchesNlohmann) {
    // The string scan takes 16 bytes, then 8, then one at a time: a byte that needs a closer
    // look (quote, backslash, control, UTF-8 lead or continuation) must be seen at any offset
    // of each width, and at the text's end.
    const std::vector<std::string> specials{
        "\"",   "\\",   "\\n",          "\\u00e9",          "\x01", "\x1f", "\x7f", "\xc3\xa9",
        "\xc3", "\xa9", "\xed\xa0\x80", "\xf0\x9f\x98\x80", "\xff", "\\x"};
    std::size_t checked = 0;
    for (const std::string& special : specials) {
        for (std::size_t before = 0; before <= 40; ++before) {
            for (std::size_t after : {0, 1, 7, 8, 15, 16, 17, 33}) {
                const std::string inner =
                    std::string(before, 'a') + special + std::string(after, 'b');
                for (const std::string& text :
                     {"{\"k\":\"" + inner + "\"}", "{\"" + inner + "\":1}", "{\"k\":\"" + inner}) {
                    JsonObjectView v;
                    ASSERT_EQ(v.scan(text), nlohmann_verdict(text)) << "text: " << text;
                    ++checked;
                }
            }
        }
    }
    EXPECT_EQ(checked, 14u * 41u * 8u * 3u);
}

// scan(text, key, nested) in one pass: the same verdict as scan(text), and `nested` holds what a
// second scan of the key's (last) value would hold when that value is an object.
void expect_nested_matches_two_passes(const std::string& text, std::string_view key) {
    JsonObjectView one;
    JsonObjectView nested;
    const JsonScanStatus st = one.scan(text, key, nested);
    JsonObjectView plain;
    ASSERT_EQ(st, plain.scan(text)) << "text: " << text;
    std::vector<JsonMember> expected;
    JsonObjectView second;
    const JsonMember* m = st == JsonScanStatus::Ok ? plain.find(key) : nullptr;
    if (m != nullptr && m->kind == JsonKind::Object) {
        ASSERT_EQ(second.scan(m->value), JsonScanStatus::Ok) << "text: " << text;
        expected = second.members();
    }
    ASSERT_EQ(nested.members().size(), expected.size()) << "text: " << text;
    for (std::size_t i = 0; i < expected.size(); ++i) {
        EXPECT_EQ(nested.members()[i].key, expected[i].key) << "text: " << text;
        EXPECT_EQ(nested.members()[i].key_text, expected[i].key_text) << "text: " << text;
        EXPECT_EQ(nested.members()[i].value, expected[i].value) << "text: " << text;
        EXPECT_EQ(nested.members()[i].kind, expected[i].kind) << "text: " << text;
    }
}

TEST(JsonScan, NestedMembersInOnePassMatchASecondScan) {
    const std::vector<std::string> texts{
        R"({"k":{"x":1,"y":[1,{"z":2}],"x":"dup"},"o":2})",
        R"({"k":{"x":1},"k":{"y":2}})",  // the last wins
        R"({"k":{"x":1},"k":7})",        // the last is not an object
        R"({"k":7,"k":{"x1":1}})",       // escaped nested key
        R"({"k":{"x":1}})",              // escaped top-level key
        R"({"o":{"k":{"x":1}}})",        // not top level
        R"({"k":{}})",
        R"({"k":{"x":1})",     // broken
        R"([{"k":{"x":1}}])",  // not an object
        R"({"kk":{"x":1},"":{"y":2}})",
    };
    for (const std::string& t : texts) {
        expect_nested_matches_two_passes(t, "k");
    }
    JsonObjectView v;
    JsonObjectView nested;
    ASSERT_EQ(v.scan(R"({"k":{"a":1,"b":2},"z":0})", "k", nested), JsonScanStatus::Ok);
    ASSERT_EQ(nested.members().size(), 2u);
    EXPECT_EQ(nested.find("b")->value, "2");
    for (const std::string& t : corpus()) {
        expect_nested_matches_two_passes(t, "a");
        expect_nested_matches_two_passes(t, "k");
    }
    std::mt19937 rng(777);
    const std::string alphabet = "{}[]\":,ak0123 \\u";
    for (int round = 0; round < 5000; ++round) {
        std::string text = texts[rng() % texts.size()];
        const std::size_t at = rng() % (text.size() + 1);
        text.insert(text.begin() + static_cast<std::ptrdiff_t>(at),
                    alphabet[rng() % alphabet.size()]);
        expect_nested_matches_two_passes(text, "k");
    }
}

TEST(JsonScan, MembersAndValuesAsWritten) {
    const std::string text = R"( {"a" : [1, 2] , "b\u0063":"x\"y", "n":-12, "o":{"p":null}} )";
    JsonObjectView v;
    ASSERT_EQ(v.scan(text), JsonScanStatus::Ok);
    ASSERT_EQ(v.members().size(), 4u);
    EXPECT_EQ(v.members()[0].key, "a");
    EXPECT_EQ(v.members()[0].value, "[1, 2]");
    EXPECT_EQ(v.members()[0].kind, JsonKind::Array);
    EXPECT_EQ(v.members()[1].key, "bc");
    EXPECT_EQ(v.members()[1].key_text, R"("b\u0063")");
    EXPECT_EQ(v.members()[1].kind, JsonKind::String);
    EXPECT_EQ(json_string(v.members()[1].value), "x\"y");
    ASSERT_NE(v.find("n"), nullptr);
    std::int64_t n = 0;
    EXPECT_TRUE(json_integer(v.find("n")->value, n));
    EXPECT_EQ(n, -12);
    EXPECT_EQ(v.find("o")->kind, JsonKind::Object);
    EXPECT_EQ(v.find("missing"), nullptr);
}

TEST(JsonScan, LimitsOnDepthAndMembers) {
    JsonObjectView v;
    const std::string deep =
        "{\"a\":" + std::string(kMaxJsonDepth, '[') + std::string(kMaxJsonDepth, ']') + "}";
    EXPECT_EQ(v.scan(deep), JsonScanStatus::TooDeep);
    const std::string ok =
        "{\"a\":" + std::string(kMaxJsonDepth - 1, '[') + std::string(kMaxJsonDepth - 1, ']') + "}";
    EXPECT_EQ(v.scan(ok), JsonScanStatus::Ok);
    std::string wide = "{";
    for (std::size_t i = 0; i <= kMaxJsonObjectMembers; ++i) {
        wide += (i ? ",\"k" : "\"k") + std::to_string(i) + "\":0";
    }
    wide += "}";
    EXPECT_EQ(v.scan(wide), JsonScanStatus::TooManyMembers);
    EXPECT_TRUE(v.members().empty());
}

TEST(JsonScan, IntegersWithinInt64) {
    std::int64_t v = 0;
    EXPECT_TRUE(json_integer("0", v));
    EXPECT_EQ(v, 0);
    EXPECT_TRUE(json_integer("-9223372036854775808", v));
    EXPECT_EQ(v, INT64_MIN);
    EXPECT_TRUE(json_integer("9223372036854775807", v));
    EXPECT_EQ(v, INT64_MAX);
    // uint64 beyond int64: an engine reading a signed count would get a negative number
    EXPECT_FALSE(json_integer("9223372036854775808", v));
    EXPECT_FALSE(json_integer("18446744073709551615", v));
    EXPECT_FALSE(json_integer("18446744073709551616", v));  // a float for nlohmann
    EXPECT_FALSE(json_integer("-9223372036854775809", v));
    EXPECT_FALSE(json_integer("5.0", v));
    EXPECT_FALSE(json_integer("5e0", v));
    for (std::string_view t : {"7", "-3", "18446744073709551616", "5.0", "1e2"}) {
        Ordered j = Ordered::parse(t);
        EXPECT_EQ(json_integer(t, v), j.is_number_integer()) << t;
    }
}

TEST(JsonScan, StringsDecodeLikeNlohmann) {
    for (std::string_view t : {R"("plain")", R"("a\"b\\c\/d")", R"("\b\f\n\r\t")",
                               R"("\u00e9\u4e2d")", R"("\ud83d\ude00!")", R"("")"}) {
        EXPECT_EQ(json_string(t), Ordered::parse(t).get<std::string>()) << t;
    }
}

// rewrite() against the same edits made on an ordered DOM (keys, order, values all equal).
TEST(JsonScan, RewriteHasObjectSemantics) {
    const std::vector<std::string> bodies = {
        R"({"model":"m","stream":true,"x":{"y":[1,2]},"max_tokens":9,"drop":1})",
        R"({"model":"m"})",
        R"({})",
        R"({"a":1,"stream":false,"a":2,"drop":0,"drop":3,"z":null})",
        R"({"\u0073tream":true,"keep":"v"})",
    };
    for (const std::string& body : bodies) {
        JsonObjectView v;
        ASSERT_EQ(v.scan(body), JsonScanStatus::Ok) << body;
        const std::string out = v.rewrite({{"stream", "false", JsonEdit::Op::Set},
                                           {"drop", "", JsonEdit::Op::Erase},
                                           {"max_tokens", "1", JsonEdit::Op::SetIfPresent},
                                           {"added", "{\"k\":true}", JsonEdit::Op::Set}});
        Ordered expect = Ordered::parse(body);
        expect["stream"] = false;
        expect.erase("drop");
        if (expect.contains("max_tokens")) {
            expect["max_tokens"] = 1;
        }
        expect["added"] = Ordered::parse(R"({"k":true})");
        Ordered got = Ordered::parse(out);
        EXPECT_EQ(got.dump(), expect.dump()) << body << " -> " << out;
    }
}

TEST(JsonScan, RewriteWritesEachKeyOnceWithItsLastValueAtItsFirstPlace) {
    const std::vector<std::pair<std::string, std::string>> cases{
        {R"({"a":1,"b":2,"a":3})", R"({"a":3,"b":2})"},
        {R"({"ab":1,"ba":2,"b":0,"ab":3,"ba":4})", R"({"ab":3,"ba":4,"b":0})"},
        {R"({"k":1,"\u006b":2})", R"({"k":2})"},                   // the same key, written two ways
        {R"({"ab":1,"ac":2,"b":3})", R"({"ab":1,"ac":2,"b":3})"},  // alike, not the same
    };
    for (const auto& [body, expected] : cases) {
        JsonObjectView v;
        ASSERT_EQ(v.scan(body), JsonScanStatus::Ok) << body;
        EXPECT_EQ(v.rewrite({}), expected) << body;
    }
}

}  // namespace
}  // namespace pdr
