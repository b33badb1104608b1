// Admin add (validation, probe, model check, duplicates) and the start-up model probe.
#include "tests/unit/router/instances/fixture.hpp"

namespace pdr::instances {
namespace {

using test::FakeHttpServer;
using test::FakeReply;

class AdminTest : public RegistryTest {
protected:
    Registry::AdminResult add(std::string type, std::string instance) {
        auto r = test::run_task(ioc, reg().add(type, instance), Duration{5000});
        EXPECT_TRUE(r.has_value()) << "add() did not finish";
        return r.value_or(Registry::AdminResult{0, ""});
    }
    static std::string error_message(const Registry::AdminResult& r) {
        auto j = nlohmann::json::parse(r.body, nullptr, false);
        if (!j.is_object() || !j.contains("error")) {
            return "<not an error body: " + r.body + ">";
        }
        return j["error"]["message"].get<std::string>();
    }
    double admin_count(std::string action, std::string result) {
        return metrics::series_value(mreg, "pdrouter_admin_requests_total",
                                     {{"action", action}, {"result", result}})
            .value_or(0);
    }
};

TEST_F(AdminTest, AddProbesAndAddsOnce) {
    cfg.model = "Qwen/Qwen3-0.6B";
    FakeHttpServer server(ioc.get_executor(), serving("Qwen3-0.6B"));
    const auto port = server.start();
    const std::string name = "127.0.0.1:" + std::to_string(port);

    auto r = add("decode", name);
    EXPECT_EQ(r.status, 200u) << r.body;
    EXPECT_EQ(nlohmann::json::parse(r.body)["message"], "Added " + name + " to decode_instances.");
    EXPECT_EQ(server.count("/v1/models"), 1u);
    ASSERT_EQ(reg().count(Role::Decode, true), 1u);
    EXPECT_EQ(reg().pick(Role::Decode)->name, name);
    EXPECT_EQ(instances_gauge(mreg, "decode", "up"), 1);
    EXPECT_EQ(admin_count("add", "ok"), 1);

    r = add("decode", "http://" + name + "/");  // same instance, URL form
    EXPECT_EQ(r.status, 409u);
    EXPECT_EQ(error_message(r), "Instance already exists.");
    EXPECT_EQ(admin_count("add", "conflict"), 1);

    r = add("prefill", name);  // same address in the other role is another instance
    EXPECT_EQ(r.status, 200u) << r.body;
    EXPECT_EQ(reg().count(Role::Prefill, false), 1u);
}

// --hide-instance-addresses: an admin-added instance is numbered after the static ones; a
// refused add (duplicate, dead) uses no number.
TEST_F(AdminTest, AddedInstancesAreNumberedAfterTheStaticOnes) {
    cfg.hide_instance_addresses = true;
    FakeHttpServer server(ioc.get_executor(), serving("m"));
    const std::string name = "127.0.0.1:" + std::to_string(server.start());
    reg().add_configured(Role::Decode, addr("127.0.0.1", 9001));
    reg().add_configured(Role::Decode, addr("127.0.0.1", 9002));
    EXPECT_EQ(add("decode", "127.0.0.1:9001").status, 409u);
    ASSERT_EQ(add("decode", name).status, 200u);
    ASSERT_EQ(add("prefill", name).status, 200u);
    EXPECT_EQ(reg().find(Role::Decode, name)->client_name(), "decode-2");
    EXPECT_EQ(reg().find(Role::Prefill, name)->client_name(), "prefill-0");
}

TEST_F(AdminTest, AddRejectsBadTypeAndAddress) {
    auto r = add("router", "127.0.0.1:1");
    EXPECT_EQ(r.status, 400u);
    EXPECT_EQ(error_message(r), "Invalid instance type.");
    r = add("", "127.0.0.1:1");
    EXPECT_EQ(r.status, 400u);
    EXPECT_EQ(error_message(r), "Invalid instance type.");
    for (const char* bad : {"", "127.0.0.1", "127.0.0.1:0", "127.0.0.1:99999", "host:port"}) {
        r = add("prefill", bad);
        EXPECT_EQ(r.status, 400u) << bad;
        EXPECT_NE(error_message(r).find("Invalid instance"), std::string::npos) << r.body;
    }
    // A 100k-character address is refused, and quoted back only in part.
    r = add("prefill", std::string(100'000, 'a') + ":1");
    EXPECT_EQ(r.status, 400u);
    EXPECT_LT(r.body.size(), 1024u);
    EXPECT_NE(error_message(r).find("... (100002 bytes)"), std::string::npos) << r.body;
    EXPECT_EQ(reg().count(Role::Prefill, false), 0u);
    EXPECT_EQ(admin_count("add", "bad_request"), 8);
}

TEST_F(AdminTest, AddFailsWhenTheProbeFails) {
    const auto dead = test::unused_port();
    auto r = add("prefill", "127.0.0.1:" + std::to_string(dead));
    EXPECT_EQ(r.status, 502u);
    EXPECT_EQ(error_message(r).rfind("Instance validation failed: ", 0), 0u) << r.body;

    FakeHttpServer broken(ioc.get_executor(), [](const FakeHttpServer::Request&) {
        return FakeReply{500, "oops"};
    });
    r = add("prefill", "127.0.0.1:" + std::to_string(broken.start()));
    EXPECT_EQ(r.status, 502u);
    EXPECT_NE(error_message(r).find("500"), std::string::npos) << r.body;

    FakeHttpServer not_models(ioc.get_executor(), [](const FakeHttpServer::Request&) {
        return FakeReply{200, "<html>hello</html>"};
    });
    r = add("prefill", "127.0.0.1:" + std::to_string(not_models.start()));
    EXPECT_EQ(r.status, 502u);
    EXPECT_EQ(reg().count(Role::Prefill, false), 0u);
    EXPECT_EQ(admin_count("add", "probe_failed"), 3);
}

TEST_F(AdminTest, AddRejectsAnotherModel) {
    cfg.model = "Qwen/Qwen3-0.6B";
    FakeHttpServer server(ioc.get_executor(), serving("meta/Llama-3-8B"));
    auto r = add("prefill", "127.0.0.1:" + std::to_string(server.start()));
    EXPECT_EQ(r.status, 400u);
    const auto msg = error_message(r);
    EXPECT_NE(msg.find("meta/Llama-3-8B"), std::string::npos) << msg;
    EXPECT_NE(msg.find("Qwen/Qwen3-0.6B"), std::string::npos) << msg;
    EXPECT_EQ(reg().count(Role::Prefill, false), 0u);
}

TEST_F(AdminTest, AnyModelIsAcceptedWhenNoneConfigured) {
    FakeHttpServer server(ioc.get_executor(), serving("whatever"));
    auto r = add("prefill", "localhost:" + std::to_string(server.start()));
    EXPECT_EQ(r.status, 200u) << r.body;
    EXPECT_EQ(reg().list(Role::Prefill).at(0)->endpoint.host, "localhost");
}

TEST_F(AdminTest, StartupProbeFailsOnlyOnModelMismatch) {
    cfg.model = "m1";
    FakeHttpServer good(ioc.get_executor(), serving("org/m1"));
    FakeHttpServer other(ioc.get_executor(), serving("m2"));
    reg().add_configured(Role::Prefill, addr("127.0.0.1", good.start()));
    reg().add_configured(Role::Decode, addr("127.0.0.1", test::unused_port()));
    auto ok = test::run_task(ioc, reg().probe_all_at_startup(), Duration{5000});
    ASSERT_TRUE(ok.has_value());
    EXPECT_TRUE(*ok);  // unreachable is tolerated (considered up until it fails)
    EXPECT_EQ(reg().count(Role::Decode, true), 1u);

    reg().add_configured(Role::Decode, addr("127.0.0.1", other.start()));
    ok = test::run_task(ioc, reg().probe_all_at_startup(), Duration{5000});
    ASSERT_TRUE(ok.has_value());
    EXPECT_FALSE(*ok);
    EXPECT_EQ(good.count("/v1/models"), 2u);
}

TEST_F(AdminTest, StartupProbeIsSkippedWithoutModel) {
    FakeHttpServer server(ioc.get_executor(), serving("m2"));
    reg().add_configured(Role::Prefill, addr("127.0.0.1", server.start()));
    auto ok = test::run_task(ioc, reg().probe_all_at_startup(), Duration{2000});
    ASSERT_TRUE(ok.has_value());
    EXPECT_TRUE(*ok);
    EXPECT_EQ(server.count("/v1/models"), 0u);
}

}  // namespace
}  // namespace pdr::instances
