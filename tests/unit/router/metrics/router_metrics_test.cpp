#include "router/metrics/router_metrics.hpp"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

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
    // No series until first use, and prometheus-cpp leaves out a family without series.
    EXPECT_FALSE(contains(text, "pdrouter_bad_requests_total"));
    EXPECT_FALSE(contains(text, "pdrouter_admin_requests_total"));
    EXPECT_TRUE(contains(text, "pdrouter_requests_in_flight 0\n"));
    EXPECT_TRUE(contains(text, "pdrouter_kv_handover_gap_seconds_bucket{le=\"+Inf\"} 0\n"));
    EXPECT_TRUE(contains(text, "pdrouter_kv_handover_gap_seconds_count 0\n"));
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
    m.legs_failed_on_down(Role::Decode, 3);
    m.flow_started(FlowMode::Push);
    m.lease_refresh_request(RouterMetrics::LeaseRefreshResult::Error);
    m.lease_refresh_request(RouterMetrics::LeaseRefreshResult::NoRoute);
    m.bad_request("invalid_request_error");
    m.admin_request("add", "conflict");
    m.set_instance_counts(Role::Decode, 2, 1);
    m.lease_refresh_sent.Increment(5);
    m.kv_handover_gap.Observe(0.002);
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
    EXPECT_TRUE(contains(t, "pdrouter_legs_failed_on_down_total{role=\"decode\"} 3\n"));
    EXPECT_TRUE(contains(t, "pdrouter_legs_failed_on_down_total{role=\"prefill\"} 0\n"));
    EXPECT_TRUE(contains(t, "pdrouter_flow_requests_total{mode=\"push\"} 1\n"));
    EXPECT_TRUE(contains(t, "pdrouter_lease_refresh_requests_total{result=\"error\"} 1\n"));
    EXPECT_TRUE(contains(t, "pdrouter_lease_refresh_requests_total{result=\"no_route\"} 1\n"));
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
    a.in_flight.Increment();
    a.requests.Increment();
    a.up.Set(1);
    std::string t = r.render();
    EXPECT_TRUE(
        contains(t, "pdrouter_instance_in_flight{instance=\"[::1]:8100\",role=\"prefill\"} 1\n"));
    EXPECT_TRUE(contains(
        t, "pdrouter_instance_requests_total{instance=\"[::1]:8100\",role=\"prefill\"} 1\n"));
    EXPECT_TRUE(contains(t, "pdrouter_instance_up{instance=\"[::1]:8100\",role=\"prefill\"} 1\n"));
    m.remove_instance(Role::Prefill, "[::1]:8100");
    a.in_flight.Decrement();  // a request still finishing on the removed instance
    t = r.render();
    EXPECT_FALSE(contains(t, "instance=\"[::1]:8100\""));
    InstanceMetrics again = m.instance(Role::Prefill, "[::1]:8100");
    EXPECT_EQ(&again.requests, &a.requests);
    EXPECT_TRUE(
        contains(r.render(),
                 "pdrouter_instance_requests_total{instance=\"[::1]:8100\",role=\"prefill\"} 1\n"));
}

std::vector<std::string> lines_of(const std::string& text) {
    std::vector<std::string> out;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) {
        out.push_back(line);
    }
    return out;
}

// Names, types and help texts as dashboards and the hand-written registry before prometheus-cpp
// had them (every family, once each has a series).
TEST(RouterMetrics, HelpAndTypeLinesAreUnchanged) {
    Registry r;
    RouterMetrics m(r);
    m.bad_request("invalid_request_error");
    m.admin_request("list", "ok");
    (void)m.instance(Role::Prefill, "p:1");
    std::set<std::string> meta;
    for (const std::string& line : lines_of(r.render())) {
        if (line.starts_with("#")) {
            EXPECT_TRUE(meta.insert(line).second) << "twice: " << line;
        }
    }
    const std::set<std::string> expected{
        "# HELP pdrouter_admin_requests_total Admin API requests, by action and result.",
        "# HELP pdrouter_bad_requests_total Client requests rejected, by error code.",
        "# HELP pdrouter_build_info Build information; the value is always 1.",
        "# HELP pdrouter_client_disconnects_total Clients that went away before the response "
        "ended, by the phase they left in.",
        "# HELP pdrouter_direct_requests_total Generation requests served by a decode instance "
        "alone, by reason.",
        "# HELP pdrouter_flow_requests_total Generation requests started, by KV handover mode.",
        "# HELP pdrouter_instance_in_flight Requests in flight on one instance (prefill or decode "
        "leg).",
        "# HELP pdrouter_instance_requests_total Upstream requests sent to one instance.",
        "# HELP pdrouter_instance_up 1 if the instance passed its last health probe, else 0.",
        "# HELP pdrouter_instances Configured instances, by role and health.",
        "# HELP pdrouter_kv_handles_held KV handles the router is keeping alive on prefill "
        "instances.",
        "# HELP pdrouter_kv_handover_gap_seconds Time from the prefill answer to the decode leg's "
        "first byte.",
        "# HELP pdrouter_kv_ready_evictions_total Entries evicted from the LMCache kv-ready table, "
        "by reason.",
        "# HELP pdrouter_kv_ready_malformed_total LMCache KV-ready messages that were not a "
        "notification, by reason.",
        "# HELP pdrouter_kv_ready_notifications_total LMCache KV-ready notifications received, by "
        "outcome.",
        "# HELP pdrouter_kv_ready_pending Entries in the LMCache kv-ready table (waiting "
        "requests, unclaimed and finished ids kept until their TTL).",
        "# HELP pdrouter_kv_ready_timeouts_total LMCache requests whose wait for KV-ready "
        "notifications timed out, by what the router did then.",
        "# HELP pdrouter_kv_ready_wait_seconds Time the LMCache flow waited for KV-ready "
        "notifications after the prefill answer.",
        "# HELP pdrouter_lease_refresh_forwarded_total Lease ids from inbound lease_refresh "
        "requests forwarded to their prefill instance.",
        "# HELP pdrouter_lease_refresh_requests_total Lease refresh requests sent to prefill "
        "instances, by result.",
        "# HELP pdrouter_lease_refresh_route_absent Prefill instances that answered 404/405 on the "
        "lease-refresh route: not refreshed until asked again.",
        "# HELP pdrouter_lease_refresh_sent_total KV lease ids the router refreshed toward prefill "
        "instances.",
        "# HELP pdrouter_lease_refresh_unknown_total Lease ids from inbound lease_refresh requests "
        "that the router did not know.",
        "# HELP pdrouter_leg_duration_seconds Duration of one upstream leg (prefill: whole leg; "
        "decode: until the last byte).",
        "# HELP pdrouter_legs_failed_on_down_total Upstream legs ended when their instance "
        "failed a health check, because they had received nothing for the probe's timeout, by "
        "role.",
        "# HELP pdrouter_mid_stream_errors_total Upstream failures after the response head was "
        "sent to the client.",
        "# HELP pdrouter_policy_picks_total Instances chosen, by role and selection policy.",
        "# HELP pdrouter_recomputes_total Requests whose KV was recomputed (re-prefilled or "
        "decoded without remote KV).",
        "# HELP pdrouter_request_duration_seconds Client request duration, from the request head "
        "to the last byte sent.",
        "# HELP pdrouter_requests_in_flight Client requests being handled now.",
        "# HELP pdrouter_requests_total Client requests answered, by route and status class.",
        "# HELP pdrouter_retries_total Upstream attempts retried on another instance.",
        "# HELP pdrouter_time_to_first_byte_seconds Client-visible time to first byte of the "
        "response body (TTFT for streams).",
        "# HELP pdrouter_upstream_errors_total Upstream failures, by leg and kind.",
        "# TYPE pdrouter_admin_requests_total counter",
        "# TYPE pdrouter_bad_requests_total counter",
        "# TYPE pdrouter_build_info gauge",
        "# TYPE pdrouter_client_disconnects_total counter",
        "# TYPE pdrouter_direct_requests_total counter",
        "# TYPE pdrouter_flow_requests_total counter",
        "# TYPE pdrouter_instance_in_flight gauge",
        "# TYPE pdrouter_instance_requests_total counter",
        "# TYPE pdrouter_instance_up gauge",
        "# TYPE pdrouter_instances gauge",
        "# TYPE pdrouter_kv_handles_held gauge",
        "# TYPE pdrouter_kv_handover_gap_seconds histogram",
        "# TYPE pdrouter_kv_ready_evictions_total counter",
        "# TYPE pdrouter_kv_ready_malformed_total counter",
        "# TYPE pdrouter_kv_ready_notifications_total counter",
        "# TYPE pdrouter_kv_ready_pending gauge",
        "# TYPE pdrouter_kv_ready_timeouts_total counter",
        "# TYPE pdrouter_kv_ready_wait_seconds histogram",
        "# TYPE pdrouter_lease_refresh_forwarded_total counter",
        "# TYPE pdrouter_lease_refresh_requests_total counter",
        "# TYPE pdrouter_lease_refresh_route_absent gauge",
        "# TYPE pdrouter_lease_refresh_sent_total counter",
        "# TYPE pdrouter_lease_refresh_unknown_total counter",
        "# TYPE pdrouter_leg_duration_seconds histogram",
        "# TYPE pdrouter_legs_failed_on_down_total counter",
        "# TYPE pdrouter_mid_stream_errors_total counter",
        "# TYPE pdrouter_policy_picks_total counter",
        "# TYPE pdrouter_recomputes_total counter",
        "# TYPE pdrouter_request_duration_seconds histogram",
        "# TYPE pdrouter_requests_in_flight gauge",
        "# TYPE pdrouter_requests_total counter",
        "# TYPE pdrouter_retries_total counter",
        "# TYPE pdrouter_time_to_first_byte_seconds histogram",
        "# TYPE pdrouter_upstream_errors_total counter",
        "# HELP pdrouter_decode_kv_params_removed_total Decode answers (whole bodies or stream "
        "events) whose kv_transfer_params the router took out before the client "
        "(--expose-decode-kv-params passes them).",
        "# TYPE pdrouter_decode_kv_params_removed_total counter",
        "# HELP pdrouter_kv_host_rewrites_total Pull-mode KV handles whose remote_host the router "
        "replaced by the prefill's address (--rewrite-kv-host).",
        "# TYPE pdrouter_kv_host_rewrites_total counter",
        "# HELP pdrouter_kv_mode_mismatch_total Prefill answers whose transfer_mode was not the "
        "router's KV mode (a prefill configured for another KV mode).",
        "# TYPE pdrouter_kv_mode_mismatch_total counter",
        "# HELP pdrouter_transfer_bytes_total Push mode with the transfer agent: KV bytes the "
        "prefills reported written (their Done notes).",
        "# TYPE pdrouter_transfer_bytes_total counter",
        "# HELP pdrouter_transfer_notes_received_total Notes the router's transfer agent received, "
        "by kind (done, failed, other) and outcome (matched, unknown, malformed).",
        "# TYPE pdrouter_transfer_notes_received_total counter",
        "# HELP pdrouter_transfer_notes_sent_total Notes the router's transfer agent sent to "
        "engines, by kind (abort, heartbeat) and result (ok, failed, no_pdx).",
        "# TYPE pdrouter_transfer_notes_sent_total counter",
        "# HELP pdrouter_transfer_seconds Push mode with the transfer agent: time from "
        "dispatching a request's legs to the prefill's copy of the KV write's Done note.",
        "# TYPE pdrouter_transfer_seconds histogram",
        "# HELP pdrouter_kv_ready_peers Other router replicas whose PULL socket KV-ready "
        "notifications for their requests are forwarded to.",
        "# TYPE pdrouter_kv_ready_peers gauge",
        "# HELP pdrouter_kv_ready_forwarded_total KV-ready notifications for another router "
        "replica's requests, or forwarded here by one, by result.",
        "# TYPE pdrouter_kv_ready_forwarded_total counter",
        "# HELP pdrouter_kv_ready_refused_total Connections to the LMCache kv-ready socket "
        "refused at the handshake, by reason: an address not in --kv-ready-allow, or a CURVE key "
        "not allowed.",
        "# TYPE pdrouter_kv_ready_refused_total counter",
        "# HELP pdrouter_kv_ready_disconnects_total Sender connections to the LMCache kv-ready "
        "socket that ended: the sender closed it, the guard refused it, or libzmq dropped it for "
        "a message over ZMQ_MAXMSGSIZE or a protocol error (notifications in flight on it are "
        "lost).",
        "# TYPE pdrouter_kv_ready_disconnects_total counter",
        "# HELP pdrouter_discovery_resolutions_total DNS discovery lookups, by what they discover "
        "and result.",
        "# TYPE pdrouter_discovery_resolutions_total counter",
        "# HELP pdrouter_discovery_addresses Addresses the last successful DNS discovery lookup "
        "gave, by what it discovers.",
        "# TYPE pdrouter_discovery_addresses gauge",
        "# HELP pdrouter_request_body_buffered_bytes Request-body bytes held against "
        "--max-buffered-body-bytes (bodies still arriving count with their whole "
        "Content-Length).",
        "# TYPE pdrouter_request_body_buffered_bytes gauge",
        "# HELP pdrouter_request_body_budget_waiting Requests waiting for "
        "--max-buffered-body-bytes to read their body.",
        "# TYPE pdrouter_request_body_budget_waiting gauge",
    };
    EXPECT_EQ(meta, expected);
}

// Every series with bounded labels exists from start-up: sample lines per name, as before.
TEST(RouterMetrics, BoundedSeriesExistFromStartUp) {
    Registry r;
    RouterMetrics m(r);
    std::map<std::string, int> samples;
    for (const std::string& line : lines_of(r.render())) {
        if (!line.empty() && !line.starts_with("#")) {
            samples[line.substr(0, line.find_first_of("{ "))] += 1;
        }
    }
    const std::map<std::string, int> expected{
        {"pdrouter_build_info", 1},
        {"pdrouter_client_disconnects_total", 3},
        {"pdrouter_direct_requests_total", 2},
        {"pdrouter_flow_requests_total", 4},
        {"pdrouter_instances", 4},
        {"pdrouter_kv_handles_held", 1},
        {"pdrouter_kv_handover_gap_seconds_bucket", 19},
        {"pdrouter_kv_handover_gap_seconds_count", 1},
        {"pdrouter_kv_handover_gap_seconds_sum", 1},
        {"pdrouter_kv_ready_evictions_total", 2},
        {"pdrouter_kv_ready_malformed_total", 6},
        {"pdrouter_kv_ready_notifications_total", 5},
        {"pdrouter_kv_ready_pending", 1},
        {"pdrouter_kv_ready_timeouts_total", 2},
        {"pdrouter_kv_ready_wait_seconds_bucket", 19},
        {"pdrouter_kv_ready_wait_seconds_count", 1},
        {"pdrouter_kv_ready_wait_seconds_sum", 1},
        {"pdrouter_lease_refresh_forwarded_total", 1},
        {"pdrouter_lease_refresh_requests_total", 3},
        {"pdrouter_lease_refresh_route_absent", 1},
        {"pdrouter_lease_refresh_sent_total", 1},
        {"pdrouter_lease_refresh_unknown_total", 1},
        {"pdrouter_leg_duration_seconds_bucket", 38},
        {"pdrouter_leg_duration_seconds_count", 2},
        {"pdrouter_leg_duration_seconds_sum", 2},
        {"pdrouter_legs_failed_on_down_total", 2},
        {"pdrouter_mid_stream_errors_total", 2},
        {"pdrouter_policy_picks_total", 8},
        {"pdrouter_recomputes_total", 1},
        {"pdrouter_request_duration_seconds_bucket", 190},
        {"pdrouter_request_duration_seconds_count", 10},
        {"pdrouter_request_duration_seconds_sum", 10},
        {"pdrouter_requests_in_flight", 1},
        {"pdrouter_requests_total", 40},
        {"pdrouter_retries_total", 2},
        {"pdrouter_time_to_first_byte_seconds_bucket", 38},
        {"pdrouter_time_to_first_byte_seconds_count", 2},
        {"pdrouter_time_to_first_byte_seconds_sum", 2},
        {"pdrouter_upstream_errors_total", 24},
        {"pdrouter_decode_kv_params_removed_total", 1},
        {"pdrouter_kv_host_rewrites_total", 1},
        {"pdrouter_kv_mode_mismatch_total", 1},
        {"pdrouter_transfer_bytes_total", 1},
        {"pdrouter_transfer_notes_received_total", 9},
        {"pdrouter_transfer_notes_sent_total", 6},
        {"pdrouter_transfer_seconds_bucket", 19},
        {"pdrouter_transfer_seconds_count", 1},
        {"pdrouter_transfer_seconds_sum", 1},
        {"pdrouter_kv_ready_peers", 1},
        {"pdrouter_kv_ready_refused_total", 2},
        {"pdrouter_kv_ready_disconnects_total", 1},
        {"pdrouter_kv_ready_forwarded_total", 5},
        {"pdrouter_discovery_resolutions_total", 9},
        {"pdrouter_discovery_addresses", 3},
        {"pdrouter_request_body_buffered_bytes", 1},
        {"pdrouter_request_body_budget_waiting", 1},
    };
    EXPECT_EQ(samples, expected);
}

TEST(RouterMetrics, RequestDurationBucketsAfterOneObservation) {
    Registry r;
    RouterMetrics m(r);
    m.request_done(Route::Completions, 200, 0.2);
    const std::string t = r.render();
    auto bucket = [&](const std::string& le) {
        return "pdrouter_request_duration_seconds_bucket{route=\"completions\",le=\"" + le + "\"} ";
    };
    for (const char* le : {"0.0005", "0.001", "0.0025", "0.005", "0.01", "0.025", "0.05", "0.1"}) {
        EXPECT_TRUE(contains(t, bucket(le) + "0\n")) << le << "\n" << t;
    }
    for (const char* le : {"0.25", "0.5", "1", "2.5", "5", "10", "15", "20", "30", "60", "+Inf"}) {
        EXPECT_TRUE(contains(t, bucket(le) + "1\n")) << le << "\n" << t;
    }
    EXPECT_TRUE(contains(t, "pdrouter_request_duration_seconds_sum{route=\"completions\"} 0.2\n"));
    EXPECT_TRUE(contains(t, "pdrouter_request_duration_seconds_count{route=\"completions\"} 1\n"));
    EXPECT_TRUE(contains(t, "pdrouter_request_duration_seconds_count{route=\"models\"} 0\n"));
}

TEST(RouterMetrics, KvReadySeries) {
    Registry r;
    RouterMetrics m(r);
    const std::string zero = r.render();
    EXPECT_TRUE(contains(zero, "pdrouter_kv_ready_notifications_total{outcome=\"early\"} 0\n"));
    EXPECT_TRUE(contains(zero, "pdrouter_kv_ready_malformed_total{reason=\"multipart\"} 0\n"));
    EXPECT_TRUE(contains(zero, "pdrouter_kv_ready_evictions_total{reason=\"ttl\"} 0\n"));
    EXPECT_TRUE(contains(zero, "pdrouter_kv_ready_timeouts_total{policy=\"proceed\"} 0\n"));
    m.kv_ready_notification(KvReadyOutcome::Matched);
    m.kv_ready_notification(KvReadyOutcome::Unknown);
    m.kv_ready_malformed(KvReadyMalformed::TooLarge);
    m.kv_ready_malformed(KvReadyMalformed::NoReqId);
    m.kv_ready_evicted(KvReadyEviction::Capacity, 3);
    m.kv_ready_timeout(KvReadyTimeoutPolicy::Error);
    m.kv_ready_pending.Set(7);
    m.kv_ready_wait.Observe(0.02);
    const std::string t = r.render();
    EXPECT_TRUE(contains(t, "pdrouter_kv_ready_notifications_total{outcome=\"matched\"} 1\n"));
    EXPECT_TRUE(contains(t, "pdrouter_kv_ready_notifications_total{outcome=\"unknown\"} 1\n"));
    // A malformed message counts once as an outcome and once under its reason.
    EXPECT_TRUE(contains(t, "pdrouter_kv_ready_notifications_total{outcome=\"malformed\"} 2\n"));
    EXPECT_TRUE(contains(t, "pdrouter_kv_ready_malformed_total{reason=\"too_large\"} 1\n"));
    EXPECT_TRUE(contains(t, "pdrouter_kv_ready_malformed_total{reason=\"no_req_id\"} 1\n"));
    EXPECT_TRUE(contains(t, "pdrouter_kv_ready_malformed_total{reason=\"not_msgpack\"} 0\n"));
    EXPECT_TRUE(contains(t, "pdrouter_kv_ready_evictions_total{reason=\"capacity\"} 3\n"));
    EXPECT_TRUE(contains(t, "pdrouter_kv_ready_timeouts_total{policy=\"error\"} 1\n"));
    EXPECT_TRUE(contains(t, "pdrouter_kv_ready_timeouts_total{policy=\"proceed\"} 0\n"));
    EXPECT_TRUE(contains(t, "pdrouter_kv_ready_pending 7\n"));
    EXPECT_TRUE(contains(t, "pdrouter_kv_ready_wait_seconds_bucket{le=\"0.025\"} 1\n"));
    EXPECT_TRUE(contains(t, "pdrouter_kv_ready_wait_seconds_bucket{le=\"0.01\"} 0\n"));
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
    m.instance(Role::Decode, "decode-0.pd.svc:8200").up.Set(1);
    InstanceMetrics gone = m.instance(Role::Prefill, "p:1");
    m.remove_instance(Role::Prefill, "p:1");
    gone.requests.Increment();
    m.kv_ready_malformed(KvReadyMalformed::Multipart);
    m.kv_ready_wait.Observe(0.3);
    prometheus::BuildCounter()
        .Name("pdrouter_escape_check_total")
        .Help("Label values with a quote, a backslash and a newline.")
        .Register(r.families())
        .Add({{"v", "quote\" back\\ nl\n"}})
        .Increment();
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
