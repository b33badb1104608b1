// Input validation of the generation routes: a table of bodies and content types → error.
#include "router/api/validate.hpp"

#include <gtest/gtest.h>

namespace pdr::api {
namespace {

constexpr auto kCmpl = GenerationKind::Completions;
constexpr auto kChat = GenerationKind::ChatCompletions;
constexpr std::string_view kJson = "application/json";

struct Row {
    const char* name;
    GenerationKind kind;
    std::string_view content_type;
    std::string_view body;
    Errc errc;
    std::string_view param;
    unsigned http_status;
};

const Row kRows[] = {
    {"ok completions", kCmpl, kJson, R"({"model":"m","prompt":"p"})", Errc::Ok, "", 200},
    {"ok chat", kChat, kJson, R"({"model":"m","messages":[]})", Errc::Ok, "", 200},
    {"ok charset param", kCmpl, "application/json; charset=utf-8",
     R"({"model":"m","prompt":["a","b"]})", Errc::Ok, "", 200},
    {"no content type", kCmpl, "", R"({"model":"m","prompt":"p"})", Errc::UnsupportedMediaType, "",
     415},
    {"form content type", kCmpl, "application/x-www-form-urlencoded",
     R"({"model":"m","prompt":"p"})", Errc::UnsupportedMediaType, "", 415},
    {"text content type", kChat, "text/plain", R"({"model":"m","messages":[]})",
     Errc::UnsupportedMediaType, "", 415},
    {"not json", kCmpl, kJson, "{model: m}", Errc::BadJson, "", 400},
    {"truncated json", kCmpl, kJson, R"({"model":"m","prompt":"p")", Errc::BadJson, "", 400},
    {"empty body", kCmpl, kJson, "", Errc::BadJson, "", 400},
    {"array body", kCmpl, kJson, R"([{"model":"m"}])", Errc::NotAnObject, "", 400},
    {"string body", kChat, kJson, R"("hello")", Errc::NotAnObject, "", 400},
    {"missing model", kCmpl, kJson, R"({"prompt":"p"})", Errc::MissingField, "model", 400},
    {"null model", kChat, kJson, R"({"model":null,"messages":[]})", Errc::MissingField, "model",
     400},
    {"numeric model", kCmpl, kJson, R"({"model":3,"prompt":"p"})", Errc::InvalidField, "model",
     400},
    {"missing prompt", kCmpl, kJson, R"({"model":"m"})", Errc::MissingField, "prompt", 400},
    {"missing messages", kChat, kJson, R"({"model":"m","prompt":"p"})", Errc::MissingField,
     "messages", 400},
    {"messages not array", kChat, kJson, R"({"model":"m","messages":"hi"})", Errc::InvalidField,
     "messages", 400},
    {"stream not bool", kCmpl, kJson, R"({"model":"m","prompt":"p","stream":"yes"})",
     Errc::InvalidField, "stream", 400},
    // Fields the prefill rewrite overwrites are checked here, or P would prefill for nothing.
    {"ok token limits", kChat, kJson,
     R"({"model":"m","messages":[],"max_completion_tokens":8,"min_tokens":8,"stream":true,)"
     R"("stream_options":{"include_usage":true}})",
     Errc::Ok, "", 200},
    {"ok null limits", kCmpl, kJson,
     R"({"model":"m","prompt":"p","max_tokens":null,"min_tokens":null,"stream_options":null})",
     Errc::Ok, "", 200},
    // One KV handle is one sequence: n > 1 is refused (never fewer choices than asked).
    {"n one", kChat, kJson, R"({"model":"m","messages":[],"n":1})", Errc::Ok, "", 200},
    {"n null", kCmpl, kJson, R"({"model":"m","prompt":"p","n":null})", Errc::Ok, "", 200},
    {"n two", kChat, kJson, R"({"model":"m","messages":[],"n":2})", Errc::InvalidField, "n", 400},
    {"n two completions", kCmpl, kJson, R"({"model":"m","prompt":"p","n":2})", Errc::InvalidField,
     "n", 400},
    {"n zero", kCmpl, kJson, R"({"model":"m","prompt":"p","n":0})", Errc::InvalidField, "n", 400},
    {"n string", kCmpl, kJson, R"({"model":"m","prompt":"p","n":"2"})", Errc::InvalidField, "n",
     400},
    {"max_tokens zero", kCmpl, kJson, R"({"model":"m","prompt":"p","max_tokens":0})",
     Errc::InvalidField, "max_tokens", 400},
    {"max_tokens string", kCmpl, kJson, R"({"model":"m","prompt":"p","max_tokens":"8"})",
     Errc::InvalidField, "max_tokens", 400},
    {"max_tokens fraction", kCmpl, kJson, R"({"model":"m","prompt":"p","max_tokens":1.5})",
     Errc::InvalidField, "max_tokens", 400},
    {"max_tokens 2^63", kCmpl, kJson,
     R"({"model":"m","prompt":"p","max_tokens":9223372036854775808})", Errc::InvalidField,
     "max_tokens", 400},
    {"max_completion_tokens negative", kChat, kJson,
     R"({"model":"m","messages":[],"max_completion_tokens":-3})", Errc::InvalidField,
     "max_completion_tokens", 400},
    {"min_tokens negative", kCmpl, kJson, R"({"model":"m","prompt":"p","min_tokens":-1})",
     Errc::InvalidField, "min_tokens", 400},
    {"min_tokens over max", kCmpl, kJson,
     R"({"model":"m","prompt":"p","max_tokens":4,"min_tokens":5})", Errc::InvalidField,
     "min_tokens", 400},
    // Chat: max_completion_tokens is the limit when given (max_tokens is its deprecated name).
    {"chat max_completion_tokens wins over a smaller max_tokens", kChat, kJson,
     R"({"model":"m","messages":[],"max_tokens":5,"max_completion_tokens":10,"min_tokens":8})",
     Errc::Ok, "", 200},
    {"chat min_tokens over max_completion_tokens", kChat, kJson,
     R"({"model":"m","messages":[],"max_tokens":50,"max_completion_tokens":10,"min_tokens":12})",
     Errc::InvalidField, "min_tokens", 400},
    {"chat max_tokens alone is the limit", kChat, kJson,
     R"({"model":"m","messages":[],"max_tokens":5,"min_tokens":8})", Errc::InvalidField,
     "min_tokens", 400},
    {"completions ignore max_completion_tokens as a limit", kCmpl, kJson,
     R"({"model":"m","prompt":"p","max_tokens":20,"max_completion_tokens":4,"min_tokens":8})",
     Errc::Ok, "", 200},
    {"stream_options without stream", kCmpl, kJson,
     R"({"model":"m","prompt":"p","stream_options":{"include_usage":true}})", Errc::InvalidField,
     "stream_options", 400},
    {"stream_options not object", kCmpl, kJson,
     R"({"model":"m","prompt":"p","stream":true,"stream_options":true})", Errc::InvalidField,
     "stream_options", 400},
};

TEST(ValidateGeneration, Table) {
    for (const Row& row : kRows) {
        SCOPED_TRACE(row.name);
        ParsedGeneration out;
        ValidationError err = validate_generation(row.kind, row.content_type, row.body, out);
        EXPECT_EQ(err.errc, row.errc) << err.message;
        EXPECT_EQ(err.param, row.param);
        if (row.errc == Errc::Ok) {
            EXPECT_TRUE(err.ok());
            EXPECT_NE(out.body.find("model"), nullptr);
        } else {
            EXPECT_FALSE(err.message.empty());
            EXPECT_EQ(static_cast<unsigned>(error_info(err.errc).status), row.http_status);
        }
    }
}

TEST(ValidateGeneration, StreamFlag) {
    ParsedGeneration out;
    ASSERT_TRUE(
        validate_generation(kCmpl, kJson, R"({"model":"m","prompt":"p","stream":true})", out).ok());
    EXPECT_TRUE(out.stream);
    ASSERT_TRUE(
        validate_generation(kCmpl, kJson, R"({"model":"m","prompt":"p","stream":null})", out).ok());
    EXPECT_FALSE(out.stream);
    ASSERT_TRUE(validate_generation(kChat, kJson, R"({"model":"m","messages":[]})", out).ok());
    EXPECT_FALSE(out.stream);
}

TEST(ValidateGeneration, KeepsKeyOrderOfTheClientBody) {
    ParsedGeneration out;
    ASSERT_TRUE(
        validate_generation(kCmpl, kJson, R"({"prompt":"p","z":1,"model":"m","a":2})", out).ok());
    std::string keys;
    for (const JsonMember& m : out.body.members()) {
        keys.append(m.key).push_back(' ');
    }
    EXPECT_EQ(keys, "prompt z model a ");
}

TEST(ValidateGeneration, RejectsDeepNestingBeforeParsing) {
    ParsedGeneration out;
    const std::string body =
        R"({"model":"m","prompt":)" + std::string(100000, '[') + std::string(100000, ']') + "}";
    ValidationError err = validate_generation(kCmpl, kJson, body, out);
    EXPECT_EQ(err.errc, Errc::BadJson);
    EXPECT_NE(err.message.find("deeper"), std::string::npos);
}

TEST(ParseObject, RejectsNonObjects) {
    disagg::Json j;
    EXPECT_TRUE(parse_object(R"({"request_ids":[]})", j).ok());
    EXPECT_EQ(parse_object("[]", j).errc, Errc::NotAnObject);
    EXPECT_EQ(parse_object("{", j).errc, Errc::BadJson);
    EXPECT_EQ(parse_object("", j).errc, Errc::BadJson);
}

TEST(ParseLeaseRefresh, TakesAnArrayOfStringsUpToTheCap) {
    std::vector<std::string> ids;
    ASSERT_TRUE(parse_lease_refresh(R"({"request_ids":["a","b"]})", ids).ok());
    EXPECT_EQ(ids, (std::vector<std::string>{"a", "b"}));
    EXPECT_EQ(parse_lease_refresh(R"({"ids":["a"]})", ids).errc, Errc::MissingField);
    EXPECT_EQ(parse_lease_refresh(R"({"request_ids":"a"})", ids).errc, Errc::InvalidField);
    const ValidationError mixed = parse_lease_refresh(R"({"request_ids":["a",1]})", ids);
    EXPECT_EQ(mixed.errc, Errc::InvalidField);
    EXPECT_EQ(mixed.param, "request_ids");
    EXPECT_TRUE(ids.empty());
    EXPECT_EQ(parse_lease_refresh("[]", ids).errc, Errc::NotAnObject);
    std::string many = R"({"request_ids":[)";
    for (std::size_t i = 0; i <= kMaxLeaseRefreshIds; ++i) {
        many += i == 0 ? R"("x")" : R"(,"x")";
    }
    many += "]}";
    EXPECT_EQ(parse_lease_refresh(many, ids).errc, Errc::InvalidField);
    EXPECT_TRUE(ids.empty());
}

}  // namespace
}  // namespace pdr::api
