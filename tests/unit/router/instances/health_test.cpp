// Health loop against a local scripted HTTP server: mark down, re-probe with backoff, recover.
#include <atomic>

#include "tests/unit/router/instances/fixture.hpp"

namespace pdr::instances {
namespace {

using test::FakeHttpServer;
using test::FakeReply;

TEST_F(RegistryTest, DownInstanceIsReprobedAndRecovers) {
    bool healthy = false;
    FakeHttpServer server(ioc.get_executor(), [&](const FakeHttpServer::Request& req) {
        if (req.target() == "/health") {
            return healthy ? FakeReply{200, ""} : FakeReply{503, "no"};
        }
        return FakeReply{404, "{}"};
    });
    const auto port = server.start();
    reg().add_configured(Role::Prefill, addr("127.0.0.1", port));
    auto p = reg().pick(Role::Prefill);
    ASSERT_TRUE(p);
    reg().start();

    reg().report_failure(*p, "connect refused");
    EXPECT_FALSE(p->up);
    EXPECT_EQ(reg().pick(Role::Prefill), nullptr);

    // Probes keep failing (backoff capped at 200 ms): at least two re-probes, still down.
    ASSERT_TRUE(test::run_until(
        ioc, [&] { return server.count("/health") >= 2; }, Duration{3000}));
    EXPECT_FALSE(p->up);
    EXPECT_NE(p->last_error.find("503"), std::string::npos);

    healthy = true;
    ASSERT_TRUE(test::run_until(
        ioc, [&] { return p->up; }, Duration{3000}));
    EXPECT_EQ(reg().pick(Role::Prefill), p);
    EXPECT_EQ(p->up_gauge->Value(), 1);
    EXPECT_EQ(instances_gauge(mreg, "prefill", "up"), 1);
    EXPECT_EQ(instances_gauge(mreg, "prefill", "down"), 0);
}

// A passing probe of an up instance keeps its error count: an engine that answers GET /health but
// fails every request is still taken out after 3 errors, however slowly they come.
TEST_F(RegistryTest, PassingProbeDoesNotResetTheErrorCountOfAnUpInstance) {
    FakeHttpServer server(ioc.get_executor(), [&](const FakeHttpServer::Request& req) {
        return req.target() == "/health" ? FakeReply{200, ""} : FakeReply{404, "{}"};
    });
    const auto port = server.start();
    reg().add_configured(Role::Decode, addr("127.0.0.1", port));
    auto d = reg().pick(Role::Decode);
    ASSERT_TRUE(d);
    reg().start();
    reg().report_leg_failure(*d, upstream::Failure::Read, "read (end of stream)");
    reg().report_leg_failure(*d, upstream::Failure::Read, "read (end of stream)");
    ASSERT_TRUE(test::run_until(
        ioc, [&] { return server.count("/health") >= 2; }, Duration{3000}));
    EXPECT_TRUE(d->up);
    reg().report_leg_failure(*d, upstream::Failure::Read, "read (end of stream)");
    EXPECT_FALSE(d->up);
    // Once down, a passing probe brings it back on trial; its first good request ends the
    // trial, with a fresh count.
    ASSERT_TRUE(test::run_until(
        ioc, [&] { return d->up; }, Duration{3000}));
    EXPECT_TRUE(d->on_trial);
    reg().report_success(*d);
    EXPECT_FALSE(d->on_trial);
    reg().report_leg_failure(*d, upstream::Failure::Read, "read (end of stream)");
    EXPECT_TRUE(d->up);
}

// Half-open: a down instance whose probe passes takes one request at a time until one succeeds;
// a failure of that trial request takes it down again at once (not after 3 in a row).
TEST_F(RegistryTest, RecoveredInstanceIsOnTrialUntilARequestSucceeds) {
    FakeHttpServer server(ioc.get_executor(), [&](const FakeHttpServer::Request& req) {
        return req.target() == "/health" ? FakeReply{200, ""} : FakeReply{404, "{}"};
    });
    const auto port = server.start();
    reg().add_configured(Role::Decode, addr("127.0.0.1", port));
    auto d = reg().pick(Role::Decode);
    ASSERT_TRUE(d);
    reg().start();
    reg().report_failure(*d, "connect refused");
    ASSERT_FALSE(d->up);
    ASSERT_TRUE(test::run_until(
        ioc, [&] { return d->up; }, Duration{3000}));
    EXPECT_TRUE(d->on_trial);
    EXPECT_EQ(reg().to_json()[0]["on_trial"], true);
    {
        InFlight trial = reg().acquire(d);
        EXPECT_EQ(reg().pick(Role::Decode), nullptr) << "a second request during the trial";
    }
    EXPECT_EQ(reg().pick(Role::Decode), d);  // the trial request ended without a verdict
    // The trial request fails: down again at once.
    reg().report_leg_failure(*d, upstream::Failure::Read, "read (end of stream)");
    EXPECT_FALSE(d->up);
    EXPECT_FALSE(d->on_trial);
    EXPECT_NE(d->down_reason.find("trial request"), std::string::npos) << d->down_reason;
    // The next probe puts it on trial again; a success brings it back in full.
    ASSERT_TRUE(test::run_until(
        ioc, [&] { return d->up; }, Duration{3000}));
    ASSERT_TRUE(d->on_trial);
    reg().report_success(*d);
    EXPECT_FALSE(d->on_trial);
    InFlight one = reg().acquire(d);
    EXPECT_EQ(reg().pick(Role::Decode), d) << "back in full rotation: concurrent requests";
}

TEST_F(RegistryTest, BackoffGrowsWhileDown) {
    cfg.health_backoff_max = Duration{10'000};
    FakeHttpServer server(ioc.get_executor(), [&](const FakeHttpServer::Request&) {
        return FakeReply{500, "x"};
    });
    const auto port = server.start();
    reg().add_configured(Role::Decode, addr("127.0.0.1", port));
    auto d = reg().pick(Role::Decode);
    reg().start();
    reg().report_failure(*d, "5xx");
    // Re-probes at ~1 s then ~3 s after the failure: exactly one probe in the first 2.2 s.
    test::run_for(ioc, Duration{700});
    EXPECT_EQ(server.count("/health"), 0u);
    ASSERT_TRUE(test::run_until(
        ioc, [&] { return server.count("/health") >= 1; }, Duration{1500}));
    test::run_for(ioc, Duration{1000});
    EXPECT_EQ(server.count("/health"), 1u);
    EXPECT_EQ(d->backoff, Duration{2000});
    EXPECT_FALSE(d->up);
}

TEST_F(RegistryTest, UpInstanceFailingHealthCheckGoesDown) {
    FakeHttpServer server(ioc.get_executor(), [&](const FakeHttpServer::Request&) {
        return FakeReply{500, "x"};
    });
    const auto port = server.start();
    reg().add_configured(Role::Decode, addr("127.0.0.1", port));
    auto d = reg().pick(Role::Decode);
    reg().start();
    ASSERT_TRUE(test::run_until(
        ioc, [&] { return !d->up; }, Duration{3000}));
    EXPECT_GE(server.count("/health"), 1u);
    EXPECT_EQ(d->failures, 0u);  // probe failures are not request failures
    EXPECT_EQ(instances_gauge(mreg, "decode", "down"), 1);
}

TEST_F(RegistryTest, HealthFallsBackToModelsWhenHealthIsMissing) {
    FakeHttpServer server(ioc.get_executor(), [&](const FakeHttpServer::Request& req) {
        if (req.target() == "/v1/models") {
            return FakeReply{200, R"({"data":[{"id":"m"}]})"};
        }
        return FakeReply{404, "{}"};
    });
    const auto port = server.start();
    reg().add_configured(Role::Decode, addr("127.0.0.1", port));
    auto d = reg().pick(Role::Decode);
    reg().start();
    reg().report_failure(*d, "timeout");
    ASSERT_TRUE(test::run_until(
        ioc, [&] { return d->up; }, Duration{3000}));
    EXPECT_GE(server.count("/health"), 1u);
    EXPECT_GE(server.count("/v1/models"), 1u);
}

TEST_F(RegistryTest, UnreachableInstanceStaysDownAndStopLetsTheLoopFinish) {
    reg().add_configured(Role::Prefill, addr("127.0.0.1", test::unused_port()));
    auto p = reg().pick(Role::Prefill);
    reg().start();
    reg().report_failure(*p, "connect refused");
    test::run_for(ioc, Duration{600});
    EXPECT_FALSE(p->up);
    EXPECT_NE(p->last_error.find("connect"), std::string::npos);
    EXPECT_EQ(reg().count(Role::Prefill, false), 1u);  // never dropped

    reg().stop();
    client.close_idle();
    // Nothing of the registry is left on the io_context: run() returns on its own.
    const auto t0 = Clock::now();
    ioc.restart();
    ioc.run_for(Duration{3000});
    EXPECT_TRUE(ioc.stopped());
    EXPECT_LT(Clock::now() - t0, Duration{2500});
}

}  // namespace
}  // namespace pdr::instances
