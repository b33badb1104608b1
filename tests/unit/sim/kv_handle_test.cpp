#include "sim/kv_handle.hpp"

#include <gtest/gtest.h>

namespace pdr::sim {
namespace {

using nlohmann::json;

KvHandle sample() {
    KvHandle h;
    h.engine_id = "pdsim-prefill-1";
    h.request_id = "req-1";
    h.host = "127.0.0.1";
    h.port = 8100;
    h.block_ids = {4, 5, 6};
    h.num_tokens = 40;
    return h;
}

TEST(KvHandle, JsonShapeAndRoundTrip) {
    json j = kv_handle_json(sample());
    EXPECT_EQ(j["do_remote_prefill"], true);
    EXPECT_EQ(j["do_remote_decode"], false);
    EXPECT_EQ(j["remote_block_ids"], json::array({4, 5, 6}));
    EXPECT_EQ(j["remote_engine_id"], "pdsim-prefill-1");
    EXPECT_EQ(j["remote_request_id"], "req-1");
    EXPECT_EQ(j["remote_host"], "127.0.0.1");
    EXPECT_EQ(j["remote_port"], 8100);
    EXPECT_EQ(j["tp_size"], 1);
    EXPECT_EQ(j["pp_size"], 1);
    EXPECT_EQ(j["remote_num_tokens"], 40);
    EXPECT_EQ(j["transfer_mode"], "pull");

    KvHandle back;
    ASSERT_FALSE(parse_kv_handle(j, back).has_value());
    EXPECT_EQ(back.engine_id, "pdsim-prefill-1");
    EXPECT_EQ(back.request_id, "req-1");
    EXPECT_EQ(back.host, "127.0.0.1");
    EXPECT_EQ(back.port, 8100);
    EXPECT_EQ(back.block_ids, (std::vector<std::int64_t>{4, 5, 6}));
    EXPECT_EQ(back.num_tokens, 40);
}

TEST(KvHandle, ListOfListsIsFlattened) {
    json j = kv_handle_json(sample());
    j["remote_block_ids"] = json::parse("[[1,2],[3]]");
    KvHandle h;
    ASSERT_FALSE(parse_kv_handle(j, h).has_value());
    EXPECT_EQ(h.block_ids, (std::vector<std::int64_t>{1, 2, 3}));
}

TEST(KvHandle, InvalidHandlesAreRejected) {
    const json good = kv_handle_json(sample());
    auto broken = [&](const char* key, json value) {
        json j = good;
        if (value.is_discarded()) {
            j.erase(key);
        } else {
            j[key] = std::move(value);
        }
        KvHandle h;
        auto err = parse_kv_handle(j, h);
        EXPECT_TRUE(err.has_value()) << key;
        return err.value_or("");
    };
    const json missing = json(json::value_t::discarded);
    EXPECT_NE(broken("do_remote_prefill", false).find("do_remote_prefill"), std::string::npos);
    broken("do_remote_prefill", missing);
    EXPECT_NE(broken("remote_engine_id", missing).find("remote_engine_id"), std::string::npos);
    broken("remote_engine_id", nullptr);
    broken("remote_request_id", "");
    broken("remote_host", 5);
    broken("remote_port", 0);
    broken("remote_port", 70000);
    broken("remote_port", "8100");
    broken("remote_block_ids", nullptr);
    broken("remote_block_ids", json::parse(R"(["a"])"));
    KvHandle h;
    EXPECT_TRUE(parse_kv_handle(json::array(), h).has_value());
}

json clean_prefill_body() {
    return json::parse(R"({"prompt":"p","stream":false,"max_tokens":1,
        "kv_transfer_params":{"do_remote_decode":true,"do_remote_prefill":false,
        "remote_engine_id":null,"remote_block_ids":null,"remote_host":null,"remote_port":null}})");
}

TEST(PrefillRules, CleanRequestHasNoViolations) {
    EXPECT_TRUE(check_prefill_request(clean_prefill_body(), true).empty());
    json with_mct = clean_prefill_body();
    with_mct["max_completion_tokens"] = 1;
    EXPECT_TRUE(check_prefill_request(with_mct, true).empty());
}

TEST(PrefillRules, EachBreachIsReported) {
    struct Case {
        const char* name;
        void (*mutate)(json&);
        const char* needle;
    };
    const Case cases[] = {
        {"stream true", [](json& b) { b["stream"] = true; }, "stream"},
        {"stream missing", [](json& b) { b.erase("stream"); }, "stream"},
        {"max_tokens 16", [](json& b) { b["max_tokens"] = 16; }, "max_tokens"},
        {"max_tokens missing", [](json& b) { b.erase("max_tokens"); }, "max_tokens"},
        {"mct 5", [](json& b) { b["max_completion_tokens"] = 5; }, "max_completion_tokens"},
        {"stream_options",
         [](json& b) {
             b["stream_options"] = {{"include_usage", true}};
         },
         "stream_options"},
        {"min_tokens", [](json& b) { b["min_tokens"] = 2; }, "min_tokens"},
        {"min_completion_tokens", [](json& b) { b["min_completion_tokens"] = 2; },
         "min_completion_tokens"},
        {"drd false", [](json& b) { b["kv_transfer_params"]["do_remote_decode"] = false; },
         "do_remote_decode"},
        {"drd missing", [](json& b) { b["kv_transfer_params"].erase("do_remote_decode"); },
         "do_remote_decode"},
    };
    for (const auto& c : cases) {
        json b = clean_prefill_body();
        c.mutate(b);
        auto v = check_prefill_request(b, true);
        ASSERT_EQ(v.size(), 1u) << c.name;
        EXPECT_NE(v[0].find(c.needle), std::string::npos) << c.name << ": " << v[0];
    }
    auto v = check_prefill_request(clean_prefill_body(), false);
    ASSERT_EQ(v.size(), 1u);
    EXPECT_NE(v[0].find("X-Request-Id"), std::string::npos);
}

TEST(PrefillRules, UnrewrittenClientBodyBreaksSeveralRules) {
    json b = json::parse(R"({"prompt":"p","stream":true,"max_tokens":64,
                            "stream_options":{"include_usage":true},"min_tokens":4})");
    b["kv_transfer_params"] = json::object();
    EXPECT_EQ(check_prefill_request(b, false).size(), 6u);
}

}  // namespace
}  // namespace pdr::sim
