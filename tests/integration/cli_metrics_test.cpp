// pdrouter as a program: command line, --demo, graceful drain on SIGTERM, and its /metrics
// output checked by promtool after real traffic (successes and failures).
#include <gtest/gtest.h>

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <regex>
#include <thread>

#include "tests/support/checks.hpp"
#include "tests/support/fixture.hpp"

namespace pdr::test {
namespace {

using nlohmann::json;

class CliTest : public ClusterTest {};

std::vector<std::string> nonempty_lines(const std::string& s) {
    std::vector<std::string> out;
    std::size_t pos = 0;
    while (pos < s.size()) {
        auto e = s.find('\n', pos);
        std::string line = s.substr(pos, e == std::string::npos ? std::string::npos : e - pos);
        pos = e == std::string::npos ? s.size() : e + 1;
        if (!line.empty()) {
            out.push_back(line);
        }
    }
    return out;
}

TEST_F(CliTest, BadFlagsExitTwoWithOneLineNamingTheFlag) {
    struct Bad {
        std::vector<std::string> args;
        std::string must_mention;
    };
    const std::vector<Bad> cases{
        {{"--bogus-flag", "--prefill", "127.0.0.1:1", "--decode", "127.0.0.1:2"}, "--bogus-flag"},
        {{"--port", "70000", "--prefill", "127.0.0.1:1", "--decode", "127.0.0.1:2"}, "--port"},
        {{"--prefill", "127.0.0.1:1", "--decode", "127.0.0.1:2", "--connect-timeout-ms", "abc"},
         "--connect-timeout-ms"},
        {{"--prefill", "127.0.0.1:1", "--decode", "127.0.0.1:2", "--on-missing-kv-params", "x"},
         "--on-missing-kv-params"},
        {{"--prefill", "no-port-here", "--decode", "127.0.0.1:2"}, "prefill"},
        {{"--decode", "127.0.0.1:2"}, "prefill"},
    };
    for (const auto& c : cases) {
        SCOPED_TRACE(c.must_mention);
        auto r = run_to_exit(pdrouter_path(), c.args, Ms{5000});
        ASSERT_TRUE(r.spawn_error.empty()) << r.spawn_error;
        EXPECT_TRUE(r.status.exited) << "still running after 5 s";
        EXPECT_EQ(r.status.code, 2) << "stderr: " << r.err;
        auto lines = nonempty_lines(r.err);
        EXPECT_EQ(lines.size(), 1u) << "stderr: " << r.err;
        EXPECT_NE(r.err.find(c.must_mention), std::string::npos) << "stderr: " << r.err;
        EXPECT_EQ(r.out, "") << "nothing on stdout for a bad flag";
    }
}

TEST_F(CliTest, VersionAndHelpExitZero) {
    auto v = run_to_exit(pdrouter_path(), {"--version"}, Ms{5000});
    EXPECT_EQ(v.status.code, 0) << v.err;
    EXPECT_EQ(v.out.rfind("pdrouter ", 0), 0u) << v.out;
    EXPECT_TRUE(std::regex_search(v.out, std::regex(R"(\d+\.\d+\.\d+)"))) << v.out;
    auto h = run_to_exit(pdrouter_path(), {"--help"}, Ms{5000});
    EXPECT_EQ(h.status.code, 0) << h.err;
    for (const char* flag : {"--prefill", "--decode", "--port", "--demo", "--admin-api-key"}) {
        EXPECT_NE(h.out.find(flag), std::string::npos) << flag << " missing from --help";
    }
}

// Starts `pdrouter --demo` with `extra` flags (into `started`), sends the curl request it prints
// and checks the exact text (the demo keeps running).
void demo_serves_its_curl_request(Cluster& c, const std::vector<std::string>& extra,
                                  Server*& started) {
    std::vector<std::string> args{
        "--demo", "--host", "127.0.0.1", "--port", "0", "--demo-token-delay-ms", "1"};
    args.insert(args.end(), extra.begin(), extra.end());
    Server& demo = c.start("pdrouter-demo", pdrouter_path(), args);
    started = &demo;
    // The log has the listening line and the curl line once the port file exists; allow a beat
    // for stdout to be flushed after the rename.
    std::string curl;
    wait_until(
        [&] {
            for (const auto& line : nonempty_lines(demo.proc.log())) {
                if (line.find("curl") != std::string::npos) {
                    curl = line;
                    return true;
                }
            }
            return false;
        },
        Ms{3000});
    ASSERT_FALSE(curl.empty()) << "no curl line printed:\n" << demo.proc.log();
    std::cout << "demo printed: " << curl << "\n";
    EXPECT_NE(demo.proc.log().find("pdrouter listening on 127.0.0.1:" + std::to_string(demo.port)),
              std::string::npos)
        << demo.proc.log();
    std::smatch url;
    ASSERT_TRUE(std::regex_search(curl, url, std::regex(R"(http://[^/\s'"]+:(\d+)(/[^\s'"]*))")))
        << curl;
    EXPECT_EQ(std::stoi(url[1]), demo.port) << "the curl line names another port";
    std::smatch data;
    ASSERT_TRUE(std::regex_search(curl, data, std::regex(R"((?:-d|--data(?:-raw)?)\s+'([^']*)')")))
        << curl;
    auto body = json::parse(data[1].str(), nullptr, false);
    ASSERT_FALSE(body.is_discarded()) << data[1];
    auto r = http_post(demo.port, url[2], data[1].str());
    EXPECT_EQ(r.status, 200) << r.describe();
    std::string error;
    std::string text =
        answer_text(r.body, body.value("stream", false), body.contains("messages"), error);
    EXPECT_TRUE(error.empty()) << error;
    EXPECT_EQ(text, expected_text(body)) << r.body;
}

TEST_F(CliTest, DemoServesItsPrintedCurlRequest) {
    Server* demo = nullptr;
    demo_serves_its_curl_request(new_cluster(), {}, demo);
    ASSERT_FALSE(HasFatalFailure());
    EXPECT_EQ(demo->proc.stop().code, 0) << "demo did not exit 0 on SIGTERM";
}

// --demo --kv-mode push: an embedded push pair on the transfer core (UCX tcp on lo). A stream
// and a chat through it give the exact text, and the router reports push mode; a build without
// UCX refuses the flags with one clear line.
TEST_F(CliTest, DemoInPushModeGivesTheExactText) {
#ifdef PDR_TEST_HAVE_UCX
    Server* started = nullptr;
    demo_serves_its_curl_request(new_cluster(), {"--kv-mode", "push"}, started);
    ASSERT_FALSE(HasFatalFailure());
    Server& demo = *started;
    for (const json& body :
         {completion_body("push demo stream", 7, true), chat_body("push demo chat", 5, false)}) {
        auto r = send_generation(demo, body);
        EXPECT_TRUE(answer_ok(r, body)) << r.describe() << demo.proc.log();
    }
    auto st = http_get(demo.port, "/status");
    ASSERT_EQ(st.status, 200) << st.describe();
    EXPECT_EQ(json::parse(st.body)["mode"], "push") << st.body;
    EXPECT_EQ(demo.proc.stop().code, 0) << "demo did not exit 0 on SIGTERM";
#else
    auto r = run_to_exit(pdrouter_path(), {"--demo", "--kv-mode", "push", "--port", "0"}, Ms{5000});
    EXPECT_EQ(r.status.code, 1) << r.err;
    EXPECT_NE(r.err.find("--demo --kv-mode push needs the UCX transfer core"), std::string::npos)
        << r.err;
#endif
}

// Sends the stream request `body` from a thread (its answer lands in `out`), with decode
// instance 0 made to wait `token_delay_ms` per token; the caller joins the thread.
std::thread stream_while_decoding(PdCluster& pd, const json& body, int token_delay_ms,
                                  TimedResponse& out) {
    sim_fault(*pd.decode[0], {{"token_delay_ms", token_delay_ms}});
    const unsigned short port = pd.router->port;
    return std::thread([port, body, &out] {
        out = http_request_timed(
            port, {"POST", "/v1/completions", {{"Content-Type", "application/json"}}, body.dump()},
            Ms{10000});
    });
}

// Once the router has the decode's first event, the stream has begun at the client (its held
// head goes out with that event): a cut from then on is an SSE error event. Before it, the
// client gets a 503 answer instead, which is also right, but not what the cut tests check.
bool stream_begun(const PdCluster& pd) {
    return wait_until(
        [&] {
            return metric(metrics_text(*pd.router), "pdrouter_time_to_first_byte_seconds_count")
                       .value_or(0) >= 1;
        },
        Ms{5000});
}

// `pid`'s blocked signals (SigBlk of its /proc status; bit sig - 1 for each), 0 when unread.
std::uint64_t blocked_signals(pid_t pid) {
    std::ifstream in("/proc/" + std::to_string(pid) + "/status");
    std::string line;
    while (std::getline(in, line)) {
        if (line.rfind("SigBlk:", 0) == 0) {
            return std::stoull(line.substr(7), nullptr, 16);
        }
    }
    return 0;
}

// main()'s mask: SIGINT and SIGTERM blocked, and not every signal (a library such as UCX
// blocks them all for the microseconds around a thread it creates, even before main()).
bool in_mains_window(std::uint64_t mask) {
    auto has = [mask](int sig) { return ((mask >> (sig - 1)) & 1u) != 0; };
    return has(SIGTERM) && has(SIGINT) && !has(SIGHUP) && !has(SIGUSR1);
}

// A SIGTERM that comes while pdrouter is still starting (here: while --demo starts its engines,
// before the router has its signal handler) drains it like any other: exit 0, not a kill.
TEST_F(CliTest, SigtermDuringStartupIsAGracefulStop) {
    // main() blocks SIGINT and SIGTERM first thing, until the router's handler exists (after
    // the demo engines have started: a few ms, less than 3 on an idle machine). Polled without
    // pauses so that the window is seen; the signal then comes in the middle of startup. The
    // poller may miss the window (a loaded machine, or a short window): the router is then
    // started again (up to 20 times); a router that never blocks the signal fails every time.
    std::optional<Process> p;
    std::string log;
    for (int attempt = 0; attempt < 20 && !p; ++attempt) {
        log = ::testing::TempDir() + "pdr-sigterm-startup-" + std::to_string(attempt) + ".log";
        std::remove(log.c_str());
        std::string error;
        auto started = Process::spawn(pdrouter_path(),
                                      {"--demo", "--port", "0", "--log-level", "info"}, log, error);
        ASSERT_TRUE(started) << error;
        const auto deadline = std::chrono::steady_clock::now() + Ms{5000};
        bool blocked = false;
        while (!blocked && std::chrono::steady_clock::now() < deadline && started->running() &&
               started->log().find("pdrouter listening on") == std::string::npos) {
            blocked = in_mains_window(blocked_signals(started->pid()));
        }
        if (blocked) {
            p = std::move(started);
        } else {
            started->kill_now();
        }
    }
    ASSERT_TRUE(p) << "SIGTERM was never seen blocked during startup (20 starts)\n"
                   << read_file(log);
    p->signal(SIGTERM);
    auto st = p->wait(Ms{10000});
    ASSERT_TRUE(st.exited) << p->log();
    EXPECT_EQ(st.signal, 0) << "killed by signal " << st.signal << "\n" << p->log();
    EXPECT_EQ(st.code, 0) << p->log();
}

TEST_F(CliTest, ListeningLineAndGracefulDrainOnSigterm) {
    auto& pd = start(PdOptions{});
    EXPECT_NE(pd.router->proc.log().find("pdrouter listening on 127.0.0.1:" +
                                         std::to_string(pd.router->port)),
              std::string::npos)
        << pd.router->proc.log();
    json body = completion_body("drain me", 8, true);
    TimedResponse t;
    std::thread client = stream_while_decoding(pd, body, 100, t);
    ASSERT_TRUE(
        wait_until([&] { return counter(sim_state(*pd.decode[0]), "in_flight") == 1; }, Ms{3000}));
    pd.router->proc.signal(SIGTERM);
    // New connections are refused (or answered 503) while draining.
    bool stopped_accepting = wait_until(
        [&] {
            auto r = http_get(pd.router->port, "/health", {}, Ms{500});
            return r.status == 0 || r.status == 503;
        },
        Ms{2000});
    client.join();
    EXPECT_TRUE(answer_ok(t.response, body)) << "in-flight stream was cut by the drain";
    EXPECT_TRUE(stopped_accepting);
    auto st = pd.router->proc.wait(Ms{5000});
    EXPECT_TRUE(st.exited);
    EXPECT_EQ(st.code, 0);
    EXPECT_TRUE(kv_freed(pd, Ms{2000}));
}

// --shutdown-grace-ms shorter than the stream: when it ends, the client gets the events so far
// and one shutting_down error event (no [DONE]), the decode leg is closed (its blocks freed),
// the WARN line says so, and pdrouter exits 0 soon after the grace.
TEST_F(CliTest, ShutdownGraceEndCutsAStreamWithAnErrorEvent) {
    auto& pd = start(PdOptions{}.router({"--shutdown-grace-ms", "300"}));
    json body = completion_body("cut me", 30, true);
    TimedResponse t;
    std::thread client = stream_while_decoding(pd, body, 200, t);
    ASSERT_TRUE(
        wait_until([&] { return counter(sim_state(*pd.decode[0]), "in_flight") == 1; }, Ms{3000}));
    ASSERT_TRUE(stream_begun(pd));
    const auto t0 = Clock::now();
    pd.router->proc.signal(SIGTERM);
    auto st = pd.router->proc.wait(Ms{5000});
    const double took = ms_between(t0, Clock::now());
    client.join();
    EXPECT_TRUE(st.exited);
    EXPECT_EQ(st.code, 0);
    EXPECT_LT(took, 2500.0) << "the drain outlasted its grace";
    const auto& r = t.response;
    EXPECT_EQ(r.status, 200) << r.describe();
    auto events = sse_data(r.body);
    auto errors = error_events(r.body);
    ASSERT_EQ(errors.size(), 1u) << r.body;
    EXPECT_NE(errors[0].find("shutting_down"), std::string::npos) << errors[0];
    EXPECT_EQ(events.back(), errors[0]) << "the error event must be last";
    EXPECT_EQ(r.body.find("[DONE]"), std::string::npos) << r.body;
    EXPECT_NE(pd.router->proc.log().find("shutdown grace of 300 ms ended"), std::string::npos)
        << pd.router->proc.log();
    EXPECT_TRUE(
        wait_until([&] { return counter(sim_state(*pd.decode[0]), "in_flight") == 0; }, Ms{3000}))
        << "the decode leg was not closed";
    EXPECT_TRUE(kv_freed(pd, Ms{2000}));
}

// A second SIGTERM during a long grace ends it at once: the stream is cut as at the grace's end.
TEST_F(CliTest, SecondSignalEndsTheGraceAtOnce) {
    auto& pd = start(PdOptions{}.router({"--shutdown-grace-ms", "60000"}));
    json body = completion_body("cut me twice", 30, true);
    TimedResponse t;
    std::thread client = stream_while_decoding(pd, body, 200, t);
    ASSERT_TRUE(
        wait_until([&] { return counter(sim_state(*pd.decode[0]), "in_flight") == 1; }, Ms{3000}));
    ASSERT_TRUE(stream_begun(pd));
    pd.router->proc.signal(SIGTERM);
    ASSERT_TRUE(wait_until(
        [&] { return pd.router->proc.log().find("draining") != std::string::npos; }, Ms{3000}));
    const auto t0 = Clock::now();
    pd.router->proc.signal(SIGTERM);
    auto st = pd.router->proc.wait(Ms{10000});
    client.join();
    EXPECT_TRUE(st.exited);
    EXPECT_EQ(st.code, 0);
    EXPECT_LT(ms_between(t0, Clock::now()), 5000.0) << "the second signal did not end the grace";
    auto errors = error_events(t.response.body);
    ASSERT_EQ(errors.size(), 1u) << t.response.body;
    EXPECT_NE(errors[0].find("shutting_down"), std::string::npos) << errors[0];
    EXPECT_NE(pd.router->proc.log().find("again: ending the grace now"), std::string::npos)
        << pd.router->proc.log();
    EXPECT_TRUE(kv_freed(pd, Ms{2000}));
}

TEST_F(CliTest, MetricsPassPromtoolAndHaveTheExpectedSeries) {
    auto& pd = start(PdOptions{}.p(2).d(1).router({"--kv-lease-timeout-ms", "600"}));
    sim_fault(*pd.decode[0], {{"delay_ms", 500}});  // a refresh period passes before decode
    for (int i = 0; i < 4; ++i) {
        json body = i % 2 ? chat_body("metrics " + std::to_string(i), 3, i > 1)
                          : completion_body("metrics " + std::to_string(i), 3, i > 1);
        EXPECT_TRUE(answer_ok(send_generation(*pd.router, body), body));
    }
    sim_fault(*pd.prefill[0], {{"status", 500}, {"count", 2}});
    sim_fault(*pd.prefill[1], {{"status", 500}, {"count", 2}});
    auto failed = send_generation(*pd.router, completion_body("fail", 3, false));
    EXPECT_EQ(failed.status, 502) << failed.describe();
    http_get(pd.router->port, "/nope");

    // A request is counted when its handler returns, which can be just after its client read
    // the last byte (and on another worker thread than the scrape's): wait, bounded, until
    // the five generation requests are all counted.
    std::string text;
    auto counted = [&] {
        return metric(text, "pdrouter_request_duration_seconds_count", {{"route", "completions"}})
                       .value_or(0) +
                   metric(text, "pdrouter_request_duration_seconds_count",
                          {{"route", "chat_completions"}})
                       .value_or(0) >=
               5;
    };
    const auto until = std::chrono::steady_clock::now() + Ms{5000};
    for (;;) {
        text = metrics_text(*pd.router);
        if (counted() || std::chrono::steady_clock::now() >= until) {
            break;
        }
        std::this_thread::sleep_for(Ms{10});
    }
    ASSERT_TRUE(counted()) << text;
    TempDir dir;
    const std::string file = dir.file("metrics.txt");
    std::ofstream(file) << text;
    ASSERT_EQ(::access("/usr/bin/promtool", X_OK) == 0 ||
                  std::system("command -v promtool >/dev/null") == 0,
              true)
        << "promtool is missing (Debian package 'prometheus')";
    const std::string out_file = dir.file("promtool.out");
    int rc = std::system(("promtool check metrics < " + file + " > " + out_file + " 2>&1").c_str());
    EXPECT_EQ(rc, 0) << "promtool check metrics:\n"
                     << read_file(out_file) << "\n--- metrics ---\n"
                     << text;

    auto expect_series = [&](const std::string& name, const std::map<std::string, std::string>& l,
                             double at_least) {
        auto v = metric(text, name, l);
        EXPECT_TRUE(v.has_value()) << name << " missing";
        if (v) {
            EXPECT_GE(*v, at_least) << name;
        }
    };
    expect_series("pdrouter_requests_total", {{"route", "completions"}, {"status_class", "2xx"}},
                  2);
    expect_series("pdrouter_requests_total",
                  {{"route", "chat_completions"}, {"status_class", "2xx"}}, 2);
    expect_series("pdrouter_requests_total", {{"route", "completions"}, {"status_class", "5xx"}},
                  1);
    expect_series("pdrouter_request_duration_seconds_count", {{"route", "completions"}}, 3);
    expect_series("pdrouter_leg_duration_seconds_count", {{"leg", "prefill"}}, 4);
    expect_series("pdrouter_leg_duration_seconds_count", {{"leg", "decode"}}, 4);
    // Time to first byte: every successful answer, streamed (2) or whole (2); not the 502.
    expect_series("pdrouter_time_to_first_byte_seconds_count", {}, 4);
    expect_series("pdrouter_time_to_first_byte_seconds_bucket", {{"le", "+Inf"}}, 4);
    EXPECT_EQ(metric(text, "pdrouter_time_to_first_byte_seconds_count", {{"route", "completions"}})
                      .value_or(-1) +
                  metric(text, "pdrouter_time_to_first_byte_seconds_count",
                         {{"route", "chat_completions"}})
                      .value_or(-1),
              4);
    expect_series("pdrouter_upstream_errors_total", {{"leg", "prefill"}, {"kind", "status_5xx"}},
                  2);
    expect_series("pdrouter_retries_total", {{"leg", "prefill"}}, 1);
    for (auto* p : pd.prefill) {
        expect_series("pdrouter_instance_in_flight",
                      {{"role", "prefill"}, {"instance", p->address()}}, 0);
        expect_series("pdrouter_instance_requests_total",
                      {{"role", "prefill"}, {"instance", p->address()}}, 1);
    }
    expect_series("pdrouter_instance_in_flight",
                  {{"role", "decode"}, {"instance", pd.decode[0]->address()}}, 0);
    expect_series("pdrouter_instances", {{"role", "decode"}, {"health", "up"}}, 1);
    expect_series("pdrouter_instances", {{"role", "prefill"}}, 2);
    expect_series("pdrouter_lease_refresh_sent_total", {}, 1);
    expect_series("pdrouter_requests_in_flight", {}, 0);
    expect_series("pdrouter_request_body_buffered_bytes", {}, 0);
    expect_series("pdrouter_request_body_budget_waiting", {}, 0);
    expect_series("pdrouter_flow_requests_total", {{"mode", "pull"}}, 4);
    expect_series("pdrouter_kv_handover_gap_seconds_count", {}, 4);
    // The LMCache KV-ready families exist (at 0) whatever the mode.
    expect_series("pdrouter_kv_ready_notifications_total", {{"outcome", "matched"}}, 0);
    expect_series("pdrouter_kv_ready_malformed_total", {{"reason", "not_msgpack"}}, 0);
    expect_series("pdrouter_kv_ready_evictions_total", {{"reason", "ttl"}}, 0);
    expect_series("pdrouter_kv_ready_timeouts_total", {{"policy", "proceed"}}, 0);
    expect_series("pdrouter_kv_ready_pending", {}, 0);
    expect_series("pdrouter_kv_ready_wait_seconds_count", {}, 0);
}

}  // namespace
}  // namespace pdr::test
