#include "router/metrics/router_metrics.hpp"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

namespace pdr::metrics {
namespace {

bool contains(const std::string& text, const std::string& needle) {
    return text.find(needle) != std::string::npos;
}

TEST(RouterMetrics, EagerSeriesAreRenderedAtZero) {
    Registry r;
    RouterMetrics m(r);
    std::string text = r.render();
    EXPECT_TRUE(
        contains(text, "pdrouter_requests_total{route=\"completions\",status_class=\"2xx\"} 0\n"));
    EXPECT_TRUE(
        contains(text, "pdrouter_requests_total{route=\"other\",status_class=\"5xx\"} 0\n"));
    EXPECT_TRUE(contains(
        text, "pdrouter_upstream_errors_total{kind=\"missing_kv_params\",leg=\"decode\"} 0\n"));
    EXPECT_TRUE(contains(text, "pdrouter_client_disconnects_total{phase=\"handover\"} 0\n"));
    EXPECT_TRUE(contains(text, "pdrouter_instances{health=\"down\",role=\"prefill\"} 0\n"));
    EXPECT_TRUE(contains(text, "pdrouter_build_info{version=\""));
    EXPECT_TRUE(contains(text, "# TYPE pdrouter_bad_requests_total counter\n"));
    EXPECT_FALSE(contains(text, "pdrouter_bad_requests_total{"));  // no series until first use
    EXPECT_TRUE(contains(text, "pdrouter_requests_in_flight 0\n"));
    EXPECT_TRUE(contains(text, "pdrouter_kv_handover_gap_seconds_bucket{le=\"+Inf\"} 0\n"));
}

TEST(RouterMetrics, StatusClassMapping) {
    EXPECT_EQ(status_class(200), "2xx");
    EXPECT_EQ(status_class(101), "2xx");
    EXPECT_EQ(status_class(302), "3xx");
    EXPECT_EQ(status_class(404), "4xx");
    EXPECT_EQ(status_class(503), "5xx");
    EXPECT_EQ(status_class(999), "5xx");
}

TEST(RouterMetrics, HelpersUpdateTheRightSeries) {
    Registry r;
    RouterMetrics m(r);
    m.request_done(Route::ChatCompletions, 200, 0.2);
    m.request_done(Route::ChatCompletions, 429);
    m.first_byte(Route::ChatCompletions, 0.01);
    m.first_byte(Route::Models, 0.01);  // not recorded: no TTFB series for models
    m.leg_done(Leg::Prefill, 0.003);
    m.upstream_error(Leg::Decode, UpstreamErrorKind::IdleTimeout);
    m.retry(Leg::Prefill);
    m.client_disconnect(DisconnectPhase::Decode);
    m.mid_stream_error(Leg::Decode);
    m.flow_started(FlowMode::Push);
    m.lease_refresh_request(false);
    m.bad_request("invalid_request_error");
    m.admin_request("add", "conflict");
    m.set_instance_counts(Role::Decode, 2, 1);
    m.lease_refresh_sent.inc(5);
    m.kv_handover_gap.observe(0.002);
    std::string t = r.render();
    EXPECT_TRUE(contains(
        t, "pdrouter_requests_total{route=\"chat_completions\",status_class=\"2xx\"} 1\n"));
    EXPECT_TRUE(contains(
        t, "pdrouter_requests_total{route=\"chat_completions\",status_class=\"4xx\"} 1\n"));
    EXPECT_TRUE(
        contains(t, "pdrouter_request_duration_seconds_count{route=\"chat_completions\"} 1\n"));
    EXPECT_TRUE(
        contains(t, "pdrouter_time_to_first_byte_seconds_count{route=\"chat_completions\"} 1\n"));
    EXPECT_FALSE(contains(t, "pdrouter_time_to_first_byte_seconds_count{route=\"models\"}"));
    EXPECT_TRUE(
        contains(t, "pdrouter_leg_duration_seconds_bucket{leg=\"prefill\",le=\"0.005\"} 1\n"));
    EXPECT_TRUE(
        contains(t, "pdrouter_leg_duration_seconds_bucket{leg=\"prefill\",le=\"0.0025\"} 0\n"));
    EXPECT_TRUE(
        contains(t, "pdrouter_upstream_errors_total{kind=\"idle_timeout\",leg=\"decode\"} 1\n"));
    EXPECT_TRUE(contains(t, "pdrouter_retries_total{leg=\"prefill\"} 1\n"));
    EXPECT_TRUE(contains(t, "pdrouter_client_disconnects_total{phase=\"decode\"} 1\n"));
    EXPECT_TRUE(contains(t, "pdrouter_mid_stream_errors_total{leg=\"decode\"} 1\n"));
    EXPECT_TRUE(contains(t, "pdrouter_flow_requests_total{mode=\"push\"} 1\n"));
    EXPECT_TRUE(contains(t, "pdrouter_lease_refresh_requests_total{result=\"error\"} 1\n"));
    EXPECT_TRUE(contains(t, "pdrouter_bad_requests_total{code=\"invalid_request_error\"} 1\n"));
    EXPECT_TRUE(
        contains(t, "pdrouter_admin_requests_total{action=\"add\",result=\"conflict\"} 1\n"));
    EXPECT_TRUE(contains(t, "pdrouter_instances{health=\"up\",role=\"decode\"} 2\n"));
    EXPECT_TRUE(contains(t, "pdrouter_instances{health=\"down\",role=\"decode\"} 1\n"));
    EXPECT_TRUE(contains(t, "pdrouter_lease_refresh_sent_total 5\n"));
    EXPECT_TRUE(contains(t, "pdrouter_kv_handover_gap_seconds_count 1\n"));
}

TEST(RouterMetrics, InstanceSeriesComeAndGo) {
    Registry r;
    RouterMetrics m(r);
    InstanceMetrics a = m.instance(Role::Prefill, "[::1]:8100");
    a.in_flight.inc();
    a.requests.inc();
    a.up.set(1);
    std::string t = r.render();
    EXPECT_TRUE(
        contains(t, "pdrouter_instance_in_flight{instance=\"[::1]:8100\",role=\"prefill\"} 1\n"));
    EXPECT_TRUE(contains(
        t, "pdrouter_instance_requests_total{instance=\"[::1]:8100\",role=\"prefill\"} 1\n"));
    EXPECT_TRUE(contains(t, "pdrouter_instance_up{instance=\"[::1]:8100\",role=\"prefill\"} 1\n"));
    m.remove_instance(Role::Prefill, "[::1]:8100");
    a.in_flight.dec();  // a request still finishing on the removed instance
    t = r.render();
    EXPECT_FALSE(contains(t, "instance=\"[::1]:8100\""));
    InstanceMetrics again = m.instance(Role::Prefill, "[::1]:8100");
    EXPECT_EQ(&again.requests, &a.requests);
    EXPECT_TRUE(
        contains(r.render(),
                 "pdrouter_instance_requests_total{instance=\"[::1]:8100\",role=\"prefill\"} 1\n"));
}

// Runs `promtool check metrics` on text; returns its exit status and output.
int promtool_check(const std::string& text, std::string& output) {
    auto dir = std::filesystem::temp_directory_path();
    auto path = dir / ("pdr_metrics_" + std::to_string(::getpid()) + ".prom");
    {
        std::ofstream f(path);
        f << text;
    }
    std::string cmd = "/usr/bin/promtool check metrics < '" + path.string() + "' 2>&1";
    FILE* p = ::popen(cmd.c_str(), "r");
    if (p == nullptr) {
        return -1;
    }
    char buf[512];
    while (std::fgets(buf, sizeof buf, p) != nullptr) {
        output += buf;
    }
    int status = ::pclose(p);
    std::filesystem::remove(path);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST(RouterMetrics, PromtoolAcceptsTheExposition) {
    ASSERT_TRUE(std::filesystem::exists("/usr/bin/promtool"))
        << "promtool not found at /usr/bin/promtool: install Debian's 'prometheus' package "
           "(apt-get install prometheus) to run this test";
    Registry r;
    RouterMetrics m(r);
    m.request_done(Route::Completions, 200, 0.5);
    m.first_byte(Route::Completions, 0.05);
    m.upstream_error(Leg::Prefill, UpstreamErrorKind::Status5xx);
    m.bad_request("invalid_request_error");
    m.admin_request("remove", "ok");
    m.instance(Role::Decode, "decode-0.pd.svc:8200").up.set(1);
    InstanceMetrics gone = m.instance(Role::Prefill, "p:1");
    m.remove_instance(Role::Prefill, "p:1");
    gone.requests.inc();
    r.counter("pdrouter_escape_check_total", "Help with \\ backslash\nand newline.",
              {{"v", "quote\" back\\ nl\n"}})
        .inc();
    std::string text = r.render();
    std::string output;
    int rc = promtool_check(text, output);
    EXPECT_EQ(rc, 0) << "promtool output:\n" << output << "\nexposition:\n" << text;
    EXPECT_EQ(output, "") << "promtool lint findings:\n" << output;

    // The check must be able to fail: a broken exposition is rejected.
    std::string bad_output;
    int bad_rc = promtool_check("# TYPE x counter\nx{a=\"unterminated} 1\n", bad_output);
    EXPECT_NE(bad_rc, 0) << bad_output;
}

}  // namespace
}  // namespace pdr::metrics
