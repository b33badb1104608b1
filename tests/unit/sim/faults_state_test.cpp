#include "sim/faults.hpp"
#include "sim/state.hpp"

#include <gtest/gtest.h>

#include <sstream>

namespace pdr::sim {
namespace {

using nlohmann::json;

TEST(FaultPlan, DefaultCountIsOne) {
    FaultPlan p;
    EXPECT_FALSE(p.take().has_value());
    ASSERT_FALSE(p.set(R"({"status":503})").has_value());
    auto f = p.take();
    ASSERT_TRUE(f.has_value());
    EXPECT_EQ(f->status, 503);
    auto body = json::parse(f->body);
    EXPECT_EQ(body["error"]["code"], 503);
    EXPECT_FALSE(p.take().has_value());
}

TEST(FaultPlan, CountAndForever) {
    FaultPlan p;
    ASSERT_FALSE(p.set(R"({"delay_ms":5,"count":3,"token_delay_ms":2})").has_value());
    for (int i = 0; i < 3; ++i) {
        auto f = p.take();
        ASSERT_TRUE(f.has_value());
        EXPECT_EQ(f->delay_ms, 5);
        EXPECT_EQ(f->token_delay_ms, 2);
        EXPECT_EQ(f->status, 0);
        EXPECT_TRUE(f->body.empty());
    }
    EXPECT_FALSE(p.take().has_value());

    ASSERT_FALSE(p.set(R"({"close_after_chunks":2,"count":-1})").has_value());
    for (int i = 0; i < 10; ++i) {
        auto f = p.take();
        ASSERT_TRUE(f.has_value());
        EXPECT_EQ(f->close_after_chunks, 2);
    }
    p.clear();
    EXPECT_FALSE(p.take().has_value());
}

TEST(FaultPlan, FieldsAndCustomBody) {
    FaultPlan p;
    ASSERT_FALSE(p.set(R"({"status":429,"body":"slow down","close_before_response":true,
                           "omit_kv_params":true})")
                     .has_value());
    auto f = p.take();
    ASSERT_TRUE(f.has_value());
    EXPECT_EQ(f->body, "slow down");
    EXPECT_TRUE(f->close_before_response);
    EXPECT_TRUE(f->omit_kv_params);
    EXPECT_EQ(f->close_after_chunks, -1);
    EXPECT_EQ(f->split_first_event_ms, 0);
    ASSERT_FALSE(p.set(R"({"split_first_event_ms":250})").has_value());
    f = p.take();
    ASSERT_TRUE(f.has_value());
    EXPECT_EQ(f->split_first_event_ms, 250);
}

TEST(FaultPlan, InvalidBodiesLeavePlanUnchanged) {
    FaultPlan p;
    ASSERT_FALSE(p.set(R"({"status":500,"count":2})").has_value());
    EXPECT_TRUE(p.set("nope").has_value());
    EXPECT_TRUE(p.set("[]").has_value());
    EXPECT_TRUE(p.set(R"({"status":"500"})").has_value());
    EXPECT_TRUE(p.set(R"({"status":42})").has_value());
    EXPECT_TRUE(p.set(R"({"delay_ms":-1})").has_value());
    EXPECT_TRUE(p.set(R"({"close_before_response":1})").has_value());
    EXPECT_TRUE(p.set(R"({"body":7})").has_value());
    EXPECT_TRUE(p.set(R"({"cut_last_event":true})").has_value());
    EXPECT_TRUE(p.set(R"({"cut_last_event":true,"close_after_chunks":0})").has_value());
    EXPECT_TRUE(p.set(R"({"split_first_event_ms":-1})").has_value());
    EXPECT_TRUE(p.set(R"({"split_first_event_ms":"5"})").has_value());
    auto f = p.take();
    ASSERT_TRUE(f.has_value());
    EXPECT_EQ(f->status, 500);
}

TEST(SimState, ViolationsAreCappedButCounted) {
    SimState s;
    for (int i = 0; i < 40; ++i) {
        s.add_violation("v" + std::to_string(i));
    }
    EXPECT_EQ(s.counters.protocol_violations, 40u);
    ASSERT_EQ(s.violations().size(), kMaxViolations);
    EXPECT_EQ(s.violations().front(), "v8");
    EXPECT_EQ(s.violations().back(), "v39");
}

TEST(SimState, RequestLogKeepsLast256OldestFirst) {
    SimState s;
    for (int i = 0; i < 300; ++i) {
        s.log_request("/v1/completions", json{{"x-request-id", std::to_string(i)}},
                      i == 299 ? std::string("not json") : json{{"n", i}}.dump());
    }
    auto j = requests_json(s);
    ASSERT_EQ(j["requests"].size(), kMaxLoggedRequests);
    EXPECT_EQ(j["requests"][0]["body"]["n"], 44);
    EXPECT_EQ(j["requests"][0]["headers"]["x-request-id"], "44");
    EXPECT_EQ(j["requests"][255]["body"], "not json");
    EXPECT_EQ(j["requests"][255]["path"], "/v1/completions");
}

TEST(SimState, StateJsonHasEveryKey) {
    SimState s;
    BlockStore store("e", 16);
    store.hold("r", 3, Clock::now() + std::chrono::seconds(5));
    s.counters.requests = 7;
    s.add_violation("bad");
    auto j = state_json(Identity{"prefill", "e", "m", 1234}, s, store);
    for (const char* key : {"role",
                            "engine_id",
                            "port",
                            "requests",
                            "completed",
                            "protocol_violations",
                            "violations",
                            "blocks_held",
                            "requests_held",
                            "freed_by_read",
                            "freed_by_expiry",
                            "freed_by_abort",
                            "lease_refreshes",
                            "lease_refresh_calls",
                            "lease_refresh_unknown",
                            "kv_reads",
                            "kv_read_failures",
                            "local_prefills",
                            "client_disconnects",
                            "in_flight",
                            "faults_applied"}) {
        EXPECT_TRUE(j.contains(key)) << key;
    }
    EXPECT_EQ(j["role"], "prefill");
    EXPECT_EQ(j["port"], 1234);
    EXPECT_EQ(j["requests"], 7);
    EXPECT_EQ(j["blocks_held"], 3);
    EXPECT_EQ(j["requests_held"], 1);
    EXPECT_EQ(j["violations"], json::array({"bad"}));
    s.reset();
    EXPECT_EQ(state_json(Identity{}, s, store)["requests"], 0);
    EXPECT_TRUE(s.violations().empty());
}

TEST(SimState, MetricsTextFormat) {
    SimState s;
    BlockStore store("e", 16);
    store.hold("r", 2, Clock::now() + std::chrono::seconds(5));
    s.counters.in_flight = 3;
    s.counters.completed = 9;
    const std::string text = metrics_text(Identity{"decode", "e", "my\"model", 1}, s, store);
    EXPECT_NE(text.find("# TYPE vllm:num_requests_running gauge\n"), std::string::npos);
    EXPECT_NE(text.find("vllm:num_requests_running{model_name=\"my\\\"model\"} 3\n"),
              std::string::npos);
    EXPECT_NE(text.find("vllm:num_requests_waiting{model_name=\"my\\\"model\"} 0\n"),
              std::string::npos);
    EXPECT_NE(text.find("vllm:kv_cache_usage_perc{model_name=\"my\\\"model\"} 0.000031\n"),
              std::string::npos);
    EXPECT_NE(text.find("# TYPE vllm:request_success_total counter\n"), std::string::npos);
    EXPECT_NE(text.find("vllm:request_success_total{model_name=\"my\\\"model\"} 9\n"),
              std::string::npos);
    // Every sample line is "name{labels} value" and every family has HELP and TYPE.
    std::istringstream in(text);
    std::string line;
    int samples = 0;
    int types = 0;
    while (std::getline(in, line)) {
        if (line.rfind("# TYPE ", 0) == 0) {
            ++types;
        } else if (line.rfind("# HELP ", 0) != 0) {
            ++samples;
            EXPECT_NE(line.find("} "), std::string::npos) << line;
        }
    }
    EXPECT_EQ(samples, types);
    EXPECT_GE(samples, 5);
}

}  // namespace
}  // namespace pdr::sim
