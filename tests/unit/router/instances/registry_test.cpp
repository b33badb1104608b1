// Selection, in-flight accounting, failure marking and listing (no network).
#include <string>
#include <vector>

#include "tests/unit/router/instances/fixture.hpp"

namespace pdr::instances {
namespace {

std::vector<std::string> pick_names(Registry& r, Role role, int n,
                                    const Instance* exclude = nullptr) {
    std::vector<std::string> out;
    for (int i = 0; i < n; ++i) {
        auto inst = r.pick(role, exclude);
        out.push_back(inst ? inst->name : "<none>");
    }
    return out;
}

TEST(RoleTest, NamesRoundTrip) {
    Role r{};
    EXPECT_TRUE(parse_role("prefill", r));
    EXPECT_EQ(r, Role::Prefill);
    EXPECT_TRUE(parse_role("decode", r));
    EXPECT_EQ(r, Role::Decode);
    EXPECT_FALSE(parse_role("Prefill", r));
    EXPECT_FALSE(parse_role("", r));
    EXPECT_EQ(to_string(Role::Prefill), "prefill");
    EXPECT_EQ(to_string(Role::Decode), "decode");
}

TEST_F(RegistryTest, PickIsRoundRobinPerRole) {
    reg().add_configured(Role::Prefill, addr("127.0.0.1", 8001));
    reg().add_configured(Role::Prefill, addr("127.0.0.1", 8002));
    reg().add_configured(Role::Prefill, addr("::1", 8003));
    reg().add_configured(Role::Decode, addr("127.0.0.1", 9001));
    reg().add_configured(Role::Prefill, addr("127.0.0.1", 8001));  // duplicate: ignored

    EXPECT_EQ(reg().count(Role::Prefill, false), 3u);
    EXPECT_EQ(pick_names(reg(), Role::Prefill, 6),
              (std::vector<std::string>{"127.0.0.1:8001", "127.0.0.1:8002", "[::1]:8003",
                                        "127.0.0.1:8001", "127.0.0.1:8002", "[::1]:8003"}));
    EXPECT_EQ(pick_names(reg(), Role::Decode, 2),
              (std::vector<std::string>{"127.0.0.1:9001", "127.0.0.1:9001"}));
    auto v6 = reg().find(Role::Prefill, "[::1]:8003");
    ASSERT_TRUE(v6);
    EXPECT_EQ(v6->endpoint.host, "::1");
    EXPECT_EQ(v6->endpoint.port, 8003);
    EXPECT_EQ(instances_gauge(mreg, "prefill", "up"), 3);
    EXPECT_EQ(instances_gauge(mreg, "decode", "up"), 1);
}

TEST_F(RegistryTest, PickWithNoInstancesIsNull) {
    EXPECT_EQ(reg().pick(Role::Prefill), nullptr);
    EXPECT_EQ(reg().pick(Role::Decode), nullptr);
}

TEST_F(RegistryTest, PickSkipsDownInstancesAndExclude) {
    reg().add_configured(Role::Prefill, addr("127.0.0.1", 8001));
    reg().add_configured(Role::Prefill, addr("127.0.0.1", 8002));
    reg().add_configured(Role::Prefill, addr("127.0.0.1", 8003));
    auto b = reg().find(Role::Prefill, "127.0.0.1:8002");
    ASSERT_TRUE(b);

    reg().report_failure(*b, "connect refused");
    EXPECT_FALSE(b->up);
    EXPECT_EQ(b->failures, 1u);
    EXPECT_EQ(b->last_error, "connect refused");
    EXPECT_EQ(b->up_gauge->Value(), 0);
    EXPECT_EQ(instances_gauge(mreg, "prefill", "up"), 2);
    EXPECT_EQ(instances_gauge(mreg, "prefill", "down"), 1);
    EXPECT_EQ(reg().count(Role::Prefill, true), 2u);
    EXPECT_EQ(reg().count(Role::Prefill, false), 3u);

    const auto names = pick_names(reg(), Role::Prefill, 4);
    EXPECT_EQ(names, (std::vector<std::string>{"127.0.0.1:8001", "127.0.0.1:8003", "127.0.0.1:8001",
                                               "127.0.0.1:8003"}));

    auto a = reg().find(Role::Prefill, "127.0.0.1:8001");
    EXPECT_EQ(pick_names(reg(), Role::Prefill, 3, a.get()),
              (std::vector<std::string>{"127.0.0.1:8003", "127.0.0.1:8003", "127.0.0.1:8003"}));

    // A second failure while down counts but does not re-transition.
    reg().report_failure(*b, "timeout");
    EXPECT_EQ(b->failures, 2u);
    EXPECT_EQ(instances_gauge(mreg, "prefill", "down"), 1);

    auto c = reg().find(Role::Prefill, "127.0.0.1:8003");
    reg().report_failure(*a, "x");
    reg().report_failure(*c, "y");
    EXPECT_EQ(reg().pick(Role::Prefill), nullptr);  // none up: no pick (the flow answers 503)

    reg().report_success(*b);
    EXPECT_TRUE(b->up);
    EXPECT_EQ(b->up_gauge->Value(), 1);
    EXPECT_EQ(pick_names(reg(), Role::Prefill, 2),
              (std::vector<std::string>{"127.0.0.1:8002", "127.0.0.1:8002"}));
    EXPECT_EQ(reg().pick(Role::Prefill, b.get()), nullptr);
}

TEST_F(RegistryTest, ServerErrorsMarkDownOnlyWhenConsecutive) {
    reg().add_configured(Role::Prefill, addr("127.0.0.1", 8001));
    auto a = reg().find(Role::Prefill, "127.0.0.1:8001");
    ASSERT_TRUE(a);
    // One 5xx (e.g. a request the engine chokes on) keeps the instance in rotation.
    reg().report_error(*a, "answered HTTP 500");
    reg().report_error(*a, "answered HTTP 500");
    EXPECT_TRUE(a->up);
    EXPECT_EQ(a->failures, 2u);
    // A success in between starts the count again.
    reg().report_success(*a);
    reg().report_error(*a, "answered HTTP 503");
    reg().report_error(*a, "answered HTTP 503");
    EXPECT_TRUE(a->up);
    EXPECT_EQ(reg().pick(Role::Prefill), a);
    // The third in a row takes it out until a probe or a leg succeeds.
    reg().report_error(*a, "answered HTTP 503");
    EXPECT_FALSE(a->up);
    EXPECT_EQ(a->last_error, "answered HTTP 503");
    EXPECT_EQ(reg().pick(Role::Prefill), nullptr);
}

// A connection that broke around one request (e.g. an engine closing a kept-alive connection just
// as the request went out) and an answer that timed out count like a 5xx; connect failures and
// connect timeouts mark down at once.
TEST_F(RegistryTest, BrokenExchangesMarkDownOnlyWhenConsecutive) {
    using upstream::Failure;
    reg().add_configured(Role::Decode, addr("127.0.0.1", 9101));
    auto d = reg().find(Role::Decode, "127.0.0.1:9101");
    ASSERT_TRUE(d);
    for (Failure f : {Failure::Read, Failure::Write, Failure::Protocol, Failure::ResponseTimeout,
                      Failure::IdleTimeout}) {
        reg().report_leg_failure(*d, f, "read (end of stream)");
        EXPECT_TRUE(d->up) << upstream::to_string(f);
        reg().report_leg_failure(*d, f, "read (end of stream)");
        EXPECT_TRUE(d->up) << upstream::to_string(f);
        EXPECT_EQ(reg().pick(Role::Decode), d);
        reg().report_leg_failure(*d, f, "read (end of stream)");
        EXPECT_FALSE(d->up) << upstream::to_string(f);
        reg().report_success(*d);
        ASSERT_TRUE(d->up);
    }
    for (Failure f : {Failure::Connect, Failure::ConnectTimeout}) {
        reg().report_leg_failure(*d, f, "connect (Connection refused)");
        EXPECT_FALSE(d->up) << upstream::to_string(f);
        EXPECT_EQ(d->last_error, "connect (Connection refused)");
        reg().report_success(*d);
        ASSERT_TRUE(d->up);
    }
}

TEST_F(RegistryTest, InFlightIsCountedByRaii) {
    reg().add_configured(Role::Decode, addr("127.0.0.1", 9001));
    auto d = reg().pick(Role::Decode);
    ASSERT_TRUE(d);
    {
        InFlight one = reg().acquire(d);
        EXPECT_EQ(d->in_flight, 1u);
        EXPECT_EQ(d->in_flight_gauge->Value(), 1);
        InFlight two = reg().acquire(d);
        EXPECT_EQ(d->in_flight, 2u);
        InFlight moved = std::move(one);
        EXPECT_FALSE(one);  // NOLINT(bugprone-use-after-move): moved-from is empty
        EXPECT_EQ(d->in_flight, 2u);
        two.release();
        two.release();
        EXPECT_EQ(d->in_flight, 1u);
        EXPECT_EQ(d->in_flight_gauge->Value(), 1);
    }
    EXPECT_EQ(d->in_flight, 0u);
    EXPECT_EQ(d->in_flight_gauge->Value(), 0);
    EXPECT_EQ(d->requests, 2u);
    EXPECT_EQ(d->requests_counter->Value(), 2);
}

TEST_F(RegistryTest, RemovedInstanceFinishesInFlightButGetsNoNewPicks) {
    reg().add_configured(Role::Prefill, addr("127.0.0.1", 8001));
    reg().add_configured(Role::Prefill, addr("127.0.0.1", 8002));
    auto a = reg().find(Role::Prefill, "127.0.0.1:8001");
    InFlight guard = reg().acquire(a);

    auto res = reg().remove("prefill", "127.0.0.1:8001");
    EXPECT_EQ(res.status, 200u);
    EXPECT_EQ(nlohmann::json::parse(res.body)["message"],
              "Removed 127.0.0.1:8001 from prefill_instances.");
    EXPECT_TRUE(a->removed);
    EXPECT_EQ(reg().count(Role::Prefill, false), 1u);
    EXPECT_EQ(reg().list(Role::Prefill).size(), 1u);
    EXPECT_EQ(instances_gauge(mreg, "prefill", "up"), 1);
    EXPECT_EQ(pick_names(reg(), Role::Prefill, 3),
              (std::vector<std::string>{"127.0.0.1:8002", "127.0.0.1:8002", "127.0.0.1:8002"}));

    // Still listed while its request finishes, flagged removed.
    auto listed = reg().to_json();
    ASSERT_EQ(listed.size(), 2u);
    EXPECT_EQ(listed[0]["name"], "127.0.0.1:8001");
    EXPECT_EQ(listed[0]["removed"], true);
    EXPECT_EQ(listed[0]["in_flight"], 1);

    guard.release();
    EXPECT_EQ(a->in_flight, 0u);
    reg().pick(Role::Prefill);  // prunes
    listed = reg().to_json();
    ASSERT_EQ(listed.size(), 1u);
    EXPECT_EQ(listed[0]["name"], "127.0.0.1:8002");
    EXPECT_EQ(listed[0]["role"], "prefill");
    EXPECT_EQ(listed[0]["up"], true);
    EXPECT_EQ(mreg.render().find("instance=\"127.0.0.1:8001\""), std::string::npos);

    // Removing again: unknown.
    res = reg().remove("prefill", "127.0.0.1:8001");
    EXPECT_EQ(res.status, 404u);
    EXPECT_NE(res.body.find("not found"), std::string::npos);
}

TEST_F(RegistryTest, RemoveValidatesTypeAndAddress) {
    reg().add_configured(Role::Decode, addr("127.0.0.1", 9001));
    auto res = reg().remove("router", "127.0.0.1:9001");
    EXPECT_EQ(res.status, 400u);
    EXPECT_EQ(nlohmann::json::parse(res.body)["error"]["message"], "Invalid instance type.");
    res = reg().remove("decode", "no port here");
    EXPECT_EQ(res.status, 400u);
    EXPECT_TRUE(nlohmann::json::parse(res.body)["error"].is_object());
    res = reg().remove("prefill", "127.0.0.1:9001");  // right name, wrong role
    EXPECT_EQ(res.status, 404u);
    res = reg().remove("decode", "http://127.0.0.1:9001");  // same instance, URL form
    EXPECT_EQ(res.status, 200u);
    EXPECT_EQ(reg().count(Role::Decode, false), 0u);
    EXPECT_EQ(reg().pick(Role::Decode), nullptr);
}

TEST_F(RegistryTest, ToJsonHasEveryField) {
    reg().add_configured(Role::Decode, addr("localhost", 9001));
    auto d = reg().pick(Role::Decode);
    { InFlight f = reg().acquire(d); }
    reg().report_failure(*d, "boom");
    auto j = reg().to_json();
    ASSERT_EQ(j.size(), 1u);
    EXPECT_EQ(j[0]["role"], "decode");
    EXPECT_EQ(j[0]["name"], "localhost:9001");
    EXPECT_EQ(j[0]["up"], false);
    EXPECT_EQ(j[0]["removed"], false);
    EXPECT_EQ(j[0]["in_flight"], 0);
    EXPECT_EQ(j[0]["requests"], 1);
    EXPECT_EQ(j[0]["failures"], 1);
    EXPECT_EQ(j[0]["last_error"], "boom");
}

TEST_F(RegistryTest, HiddenAddressesNameInstancesByRoleAndOrder) {
    cfg.hide_instance_addresses = true;
    reg().add_configured(Role::Prefill, addr("127.0.0.1", 8001));
    reg().add_configured(Role::Decode, addr("127.0.0.1", 9001));
    reg().add_configured(Role::Prefill, addr("127.0.0.1", 8001));  // duplicate: no number used
    reg().add_configured(Role::Prefill, addr("127.0.0.1", 8002));
    auto p0 = reg().find(Role::Prefill, "127.0.0.1:8001");
    auto p1 = reg().find(Role::Prefill, "127.0.0.1:8002");
    auto d0 = reg().find(Role::Decode, "127.0.0.1:9001");
    ASSERT_TRUE(p0 && p1 && d0);
    EXPECT_EQ(p0->client_name(), "prefill-0");
    EXPECT_EQ(p1->client_name(), "prefill-1");
    EXPECT_EQ(d0->client_name(), "decode-0");
    EXPECT_EQ(p0->name, "127.0.0.1:8001");  // logs and the admin API keep the address

    // The metric series are labelled by the public name only.
    std::string text = mreg.render();
    EXPECT_NE(text.find("instance=\"prefill-0\""), std::string::npos) << text;
    EXPECT_NE(text.find("instance=\"decode-0\""), std::string::npos) << text;
    EXPECT_EQ(text.find("127.0.0.1"), std::string::npos) << text;

    // GET /instances (admin) maps one to the other.
    auto j = reg().to_json();
    ASSERT_EQ(j.size(), 3u);
    EXPECT_EQ(j[0]["name"], "127.0.0.1:8001");
    EXPECT_EQ(j[0]["public_name"], "prefill-0");

    // Removed, then added again: a new number, never the old one; the old series goes.
    EXPECT_EQ(reg().remove("prefill", "127.0.0.1:8001").status, 200u);
    reg().pick(Role::Prefill);  // prunes
    reg().add_configured(Role::Prefill, addr("127.0.0.1", 8001));
    EXPECT_EQ(reg().find(Role::Prefill, "127.0.0.1:8001")->client_name(), "prefill-2");
    text = mreg.render();
    EXPECT_EQ(text.find("instance=\"prefill-0\""), std::string::npos) << text;
    EXPECT_NE(text.find("instance=\"prefill-2\""), std::string::npos) << text;
}

TEST_F(RegistryTest, AddressesAreShownByDefault) {
    reg().add_configured(Role::Decode, addr("127.0.0.1", 9001));
    auto d = reg().find(Role::Decode, "127.0.0.1:9001");
    ASSERT_TRUE(d);
    EXPECT_EQ(d->client_name(), "127.0.0.1:9001");
    EXPECT_NE(mreg.render().find("instance=\"127.0.0.1:9001\""), std::string::npos);
    EXPECT_EQ(reg().to_json()[0]["public_name"], "127.0.0.1:9001");
}

TEST(ModelMatchTest, ExactOrLastPathComponent) {
    EXPECT_TRUE(model_matches("Qwen/Qwen3-0.6B", "Qwen/Qwen3-0.6B"));
    EXPECT_TRUE(model_matches("Qwen/Qwen3-0.6B", "Qwen3-0.6B"));
    EXPECT_TRUE(model_matches("Qwen3-0.6B", "Qwen/Qwen3-0.6B"));
    EXPECT_TRUE(model_matches("/models/Qwen3-0.6B", "Qwen/Qwen3-0.6B"));
    EXPECT_FALSE(model_matches("Qwen/Qwen3-8B", "Qwen/Qwen3-0.6B"));
    EXPECT_FALSE(model_matches("a/", "b/"));
    EXPECT_FALSE(model_matches("", "x"));
}

}  // namespace
}  // namespace pdr::instances
