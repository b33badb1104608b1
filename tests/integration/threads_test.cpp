// --threads N with real processes: requests accepted by every worker thread succeed and are
// counted once; the shared state is one for all workers (an admin change, a request id in
// flight, a lease held by a request on one worker and refreshed through another); the default is
// one worker per CPU the router may run on. Connections reach the workers through SO_REUSEPORT:
// each test checks that its requests did land on more than one worker.
#include <gtest/gtest.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "router/api/run.hpp"
#include "tests/support/checks.hpp"
#include "tests/support/fixture.hpp"

namespace pdr::test {
namespace {

using nlohmann::json;

class ThreadsTest : public ClusterTest {};

constexpr int kWorkers = 4;
constexpr const char* kKey = "threads-admin-key";

// pdrouter_worker_requests_total of each worker (0 for a worker with no series yet).
std::vector<double> per_worker(const Server& router, int workers) {
    const std::string m = metrics_text(router);
    std::vector<double> out;
    for (int i = 0; i < workers; ++i) {
        out.push_back(metric(m, "pdrouter_worker_requests_total", {{"worker", std::to_string(i)}})
                          .value_or(0));
    }
    return out;
}

// How many workers handled at least one request between `before` and `after`.
int workers_used(const std::vector<double>& before, const std::vector<double>& after) {
    int n = 0;
    for (std::size_t i = 0; i < after.size(); ++i) {
        n += after[i] > before[i] ? 1 : 0;
    }
    return n;
}

// Sends `n` generation requests at once, each on its own connection; returns the answers.
std::vector<HttpResponse> send_at_once(const Server& router, const std::vector<json>& bodies,
                                       const std::string& id_prefix) {
    std::vector<HttpResponse> answers(bodies.size());
    std::vector<std::thread> threads;
    for (std::size_t i = 0; i < bodies.size(); ++i) {
        threads.emplace_back([&, i] {
            answers[i] = send_generation(
                router, bodies[i], {{"X-Request-Id", id_prefix + std::to_string(i)}}, Ms{30000});
        });
    }
    for (auto& t : threads) {
        t.join();
    }
    return answers;
}

TEST_F(ThreadsTest, RequestsOnEveryWorkerSucceedAndAreCountedOnce) {
    auto& pd = start(PdOptions{}.p(2).d(2).router({"--threads", std::to_string(kWorkers)}));
    const json status = http_get(pd.router->port, "/status").json();
    EXPECT_EQ(status.value("worker_threads", 0), kWorkers) << status.dump();
    constexpr int kN = 64;
    std::vector<json> bodies;
    for (int i = 0; i < kN; ++i) {
        const std::string prompt = "worker prompt " + std::to_string(i);
        bodies.push_back(i % 2 == 0 ? completion_body(prompt, 3 + i % 7, i % 4 == 0)
                                    : chat_body(prompt, 3 + i % 5, i % 4 == 1));
    }
    const auto before = per_worker(*pd.router, kWorkers);
    const auto answers = send_at_once(*pd.router, bodies, "w-");
    const auto after = per_worker(*pd.router, kWorkers);
    int ok = 0;
    for (int i = 0; i < kN; ++i) {
        const auto res = answer_ok(answers[i], bodies[i]);
        EXPECT_TRUE(res) << "request " << i;
        ok += res ? 1 : 0;
    }
    EXPECT_EQ(ok, kN);
    EXPECT_GE(workers_used(before, after), 2) << "every connection went to one worker";
    double handled = 0;
    for (int i = 0; i < kWorkers; ++i) {
        handled += after[i] - before[i];
    }
    EXPECT_EQ(handled, kN + 1);  // and the /metrics scrape that read `before`
    EXPECT_EQ(sum_counter(pd.prefill, "requests"), kN);
    EXPECT_EQ(sum_counter(pd.decode, "requests"), kN);
    const std::string m = metrics_text(*pd.router);
    EXPECT_EQ(
        metric(m, "pdrouter_requests_total", {{"route", "completions"}, {"status_class", "2xx"}})
                .value_or(0) +
            metric(m, "pdrouter_requests_total",
                   {{"route", "chat_completions"}, {"status_class", "2xx"}})
                .value_or(0),
        kN)
        << m;
    EXPECT_EQ(metric(m, "pdrouter_requests_in_flight").value_or(-1), 0) << m;
    EXPECT_EQ(metric(m, "pdrouter_instance_in_flight").value_or(-1), 0) << m;
    EXPECT_TRUE(no_violations(pd));
    EXPECT_TRUE(kv_freed(pd, Ms{3000}));
}

TEST_F(ThreadsTest, AnAdminChangeIsSeenByEveryWorker) {
    auto& pd = start(PdOptions{}.p(1).d(2).router(
        {"--threads", std::to_string(kWorkers), "--admin-api-key", kKey}));
    const Headers auth{{"X-API-Key", kKey}};
    Server& gone = *pd.decode[1];
    auto rm = http_post_json(pd.router->port, "/instances/remove",
                             {{"type", "decode"}, {"instance", gone.address()}}, auth);
    ASSERT_EQ(rm.status, 200) << rm.describe();
    std::vector<json> bodies(16, completion_body("after the remove", 3, false));
    auto before = per_worker(*pd.router, kWorkers);
    for (const auto& a : send_at_once(*pd.router, bodies, "rm-")) {
        EXPECT_TRUE(answer_ok(a, bodies[0]));
    }
    EXPECT_GE(workers_used(before, per_worker(*pd.router, kWorkers)), 2);
    EXPECT_EQ(counter(sim_state(gone), "requests"), 0)
        << "a worker still picked the removed decode";

    auto add = http_post_json(pd.router->port, "/instances/add",
                              {{"type", "decode"}, {"instance", gone.address()}}, auth);
    ASSERT_EQ(add.status, 200) << add.describe();
    before = per_worker(*pd.router, kWorkers);
    for (const auto& a : send_at_once(*pd.router, bodies, "add-")) {
        EXPECT_TRUE(answer_ok(a, bodies[0]));
    }
    EXPECT_GE(workers_used(before, per_worker(*pd.router, kWorkers)), 2);
    // Round robin over both decodes again, whichever worker picked.
    EXPECT_EQ(counter(sim_state(gone), "requests"), 8);
    EXPECT_EQ(counter(sim_state(*pd.decode[0]), "requests"), 16 + 8);
    EXPECT_TRUE(no_violations(pd));
}

// Under churn: waves of 32 streams at once while one thread adds and removes a prefill and a
// decode through the admin API as fast as it is answered, and the discovery name of the decodes
// flips every second between two addresses and one. Every stream ends whole with the exact
// text, every admin call is answered 200, the router neither crashes nor hangs, and once it is
// quiet no in-flight count is left behind on any instance, the removed-and-re-added ones
// included.
TEST_F(ThreadsTest, AdminChurnAndAFlippingDnsNameUnderStreamsLeaveNothingInFlight) {
    Cluster& c = new_cluster();
    Server& p0 = c.start_pdsim("prefill");
    Server& p1 = c.start_pdsim("prefill");  // added and removed over and over
    Server& d1 = c.start_pdsim("decode", {"--token-delay-ms", "15"});
    const std::string port = std::to_string(d1.port);
    Server& d2 =
        c.start_pdsim("decode", {"--host", "127.0.0.2", "--port", port, "--token-delay-ms", "15"});
    Server& d3 = c.start_pdsim("decode", {"--token-delay-ms", "15"});  // static, churned too
    const std::string hosts = c.dir().file("hosts");
    auto publish = [&](const std::string& addresses) {
        std::ofstream(hosts + ".new") << "decode.pd.test " << addresses << "\n";
        std::rename((hosts + ".new").c_str(), hosts.c_str());
    };
    publish("127.0.0.1 127.0.0.2");
    Server& router = c.start_router(
        {p0.address()}, {d3.address()},
        {"--threads", std::to_string(kWorkers), "--admin-api-key", kKey, "--decode-dns",
         "decode.pd.test:" + port, "--dns-hosts-file", hosts, "--dns-refresh-ms", "100"});
    const Headers auth{{"X-API-Key", kKey}};
    const auto d2_in = [&] {
        return metric(metrics_text(router), "pdrouter_discovery_addresses", {{"role", "decode"}})
                   .value_or(0) == 2;
    };
    ASSERT_TRUE(wait_until(d2_in, Ms{5000})) << metrics_text(router);

    std::atomic<bool> stop{false};
    std::atomic<int> admin_calls{0};
    std::mutex mu;
    std::vector<std::string> admin_errors;
    std::thread churn([&] {
        const std::vector<std::pair<std::string, const Server*>> steps = {{"add prefill", &p1},
                                                                          {"remove prefill", &p1},
                                                                          {"remove decode", &d3},
                                                                          {"add decode", &d3}};
        for (int i = 0; i < 2000 && !stop; ++i) {
            const auto& [what, who] = steps[i % steps.size()];
            const std::string op = what.substr(0, what.find(' '));
            const std::string role = what.substr(what.find(' ') + 1);
            auto r = http_post_json(router.port, "/instances/" + op,
                                    {{"type", role}, {"instance", who->address()}}, auth);
            ++admin_calls;
            if (r.status != 200) {
                std::lock_guard lk(mu);
                admin_errors.push_back(what + ": " + r.describe());
            }
        }
    });
    std::thread dns([&] {
        std::mutex m;
        std::condition_variable cv;
        for (int flip = 1; flip <= 30 && !stop; ++flip) {
            publish(flip % 2 ? "127.0.0.2" : "127.0.0.1 127.0.0.2");
            std::unique_lock lk(m);
            cv.wait_for(lk, std::chrono::seconds(1), [&] { return stop.load(); });
        }
    });
    constexpr int kStreams = 32;
    int waves = 0, ok = 0, sent = 0;
    const auto t0 = Clock::now();
    while (waves < 10 && (waves < 3 || Clock::now() - t0 < std::chrono::seconds(4))) {
        std::vector<json> bodies;
        for (int i = 0; i < kStreams; ++i) {
            bodies.push_back(
                i % 2 ? chat_body("churn " + std::to_string(waves * 100 + i), 8, true)
                      : completion_body("churn " + std::to_string(waves * 100 + i), 8, true));
        }
        const auto answers = send_at_once(router, bodies, "churn-" + std::to_string(waves) + "-");
        for (int i = 0; i < kStreams; ++i) {
            const auto res = answer_ok(answers[i], bodies[i]);
            EXPECT_TRUE(res) << "wave " << waves << " stream " << i;
            ok += res ? 1 : 0;
        }
        sent += kStreams;
        ++waves;
    }
    stop = true;
    churn.join();
    dns.join();
    EXPECT_EQ(ok, sent);
    EXPECT_GE(admin_calls, 8) << "the admin churn did not run beside the streams";
    std::cout << "[churn] " << waves << " waves, " << ok << "/" << sent << " streams whole, "
              << admin_calls << " admin calls\n";
    for (const auto& e : admin_errors) {
        ADD_FAILURE() << "admin call not answered 200: " << e;
    }
    EXPECT_TRUE(router.proc.running());
    EXPECT_EQ(http_get(router.port, "/health").status, 200);
    // Quiet, with everything back in: p1 and d3 added (whatever the churn left), both names.
    for (const auto& [role, who] :
         std::vector<std::pair<std::string, const Server*>>{{"prefill", &p1}, {"decode", &d3}}) {
        auto r = http_post_json(router.port, "/instances/add",
                                {{"type", role}, {"instance", who->address()}}, auth);
        EXPECT_TRUE(r.status == 200 ||
                    (r.status == 409 && r.body.find("already") != std::string::npos))
            << r.describe();
    }
    publish("127.0.0.1 127.0.0.2");
    EXPECT_TRUE(wait_until(d2_in, Ms{5000}));
    std::string m;
    EXPECT_TRUE(wait_until(
        [&] {
            m = metrics_text(router);
            return metric(m, "pdrouter_requests_in_flight").value_or(-1) == 0 &&
                   metric(m, "pdrouter_instance_in_flight").value_or(-1) == 0;
        },
        Ms{5000}))
        << m;
    for (const auto& [role, who] :
         std::vector<std::pair<std::string, const Server*>>{{"prefill", &p0},
                                                            {"prefill", &p1},
                                                            {"decode", &d1},
                                                            {"decode", &d2},
                                                            {"decode", &d3}}) {
        const std::string addr = who == &d2 ? "127.0.0.2:" + port : who->address();
        EXPECT_EQ(metric(m, "pdrouter_instance_in_flight", {{"role", role}, {"instance", addr}})
                      .value_or(-1),
                  0)
            << role << " " << addr << "\n"
            << m;
    }
    // and the instances serve again
    for (int i = 0; i < 8; ++i) {
        const json body = completion_body("after the churn " + std::to_string(i), 4, i % 2);
        EXPECT_TRUE(answer_ok(send_generation(router, body), body));
    }
}

TEST_F(ThreadsTest, ARequestIdInFlightIsRefusedOnEveryWorker) {
    auto& pd = start(PdOptions{}.router({"--threads", std::to_string(kWorkers)}));
    sim_fault(*pd.decode[0], {{"delay_ms", 3000}, {"count", 1}});
    const json body = completion_body("hold this id", 3, false);
    HttpResponse first;
    std::thread holder([&] {
        first = send_generation(*pd.router, body, {{"X-Request-Id", "dup-1"}}, Ms{10000});
    });
    ASSERT_TRUE(
        wait_until([&] { return counter(sim_state(*pd.decode[0]), "requests") == 1; }, Ms{5000}));
    const auto before = per_worker(*pd.router, kWorkers);
    constexpr int kN = 12;
    std::vector<HttpResponse> again(kN);
    std::vector<std::thread> threads;
    for (int i = 0; i < kN; ++i) {
        threads.emplace_back([&, i] {
            again[i] = send_generation(*pd.router, body, {{"X-Request-Id", "dup-1"}}, Ms{5000});
        });
    }
    for (auto& t : threads) {
        t.join();
    }
    const auto after = per_worker(*pd.router, kWorkers);
    for (const auto& a : again) {
        EXPECT_EQ(a.status, 409) << a.describe();
    }
    EXPECT_GE(workers_used(before, after), 2);
    holder.join();
    EXPECT_TRUE(answer_ok(first, body));
    EXPECT_EQ(counter(sim_state(*pd.prefill[0]), "requests"), 1);
}

TEST_F(ThreadsTest, ALeaseHeldOnOneWorkerIsRefreshedThroughAnyOther) {
    const Headers admin{{"X-API-Key", kKey}};
    auto& pd =
        start(PdOptions{}.router({"--threads", std::to_string(kWorkers), "--kv-lease-timeout-ms",
                                  "60000", "--admin-api-key", kKey}));
    sim_fault(*pd.decode[0], {{"delay_ms", 3000}, {"count", 1}});
    const json body = completion_body("refresh me from anywhere", 3, false);
    HttpResponse r;
    std::thread client([&] {
        r = send_generation(*pd.router, body, {{"X-Request-Id", "held-1"}}, Ms{10000});
    });
    ASSERT_TRUE(
        wait_until([&] { return counter(sim_state(*pd.decode[0]), "requests") == 1; }, Ms{5000}));
    const auto calls = counter(sim_state(*pd.prefill[0]), "lease_refresh_calls");
    const auto before = per_worker(*pd.router, kWorkers);
    constexpr int kN = 8;
    std::vector<HttpResponse> answers(kN);
    std::vector<std::thread> threads;
    for (int i = 0; i < kN; ++i) {
        threads.emplace_back([&, i] {
            answers[i] = http_post_json(pd.router->port, "/internal/nixl/lease_refresh",
                                        {{"request_ids", {"held-1"}}}, admin);
        });
    }
    for (auto& t : threads) {
        t.join();
    }
    const auto after = per_worker(*pd.router, kWorkers);
    for (const auto& a : answers) {
        ASSERT_EQ(a.status, 200) << a.describe();
        EXPECT_EQ(a.json().value("forwarded", -1), 1) << a.body;
        EXPECT_EQ(a.json().value("unknown", -1), 0) << a.body;
    }
    EXPECT_GE(workers_used(before, after), 2);
    EXPECT_TRUE(wait_until(
        [&] { return counter(sim_state(*pd.prefill[0]), "lease_refresh_calls") >= calls + kN; },
        Ms{3000}));
    client.join();
    EXPECT_TRUE(answer_ok(r, body));
    EXPECT_TRUE(kv_freed(pd, Ms{2000}));
}

TEST_F(ThreadsTest, TheDefaultIsOneWorkerPerCpuTheRouterMayUse) {
    auto& pd = start(PdOptions{});
    cpu_set_t cpus;
    CPU_ZERO(&cpus);
    ASSERT_EQ(sched_getaffinity(0, sizeof(cpus), &cpus), 0);
    std::size_t expected = static_cast<std::size_t>(CPU_COUNT(&cpus));
    std::ifstream cpu_max("/sys/fs/cgroup/cpu.max");
    std::string line;
    if (cpu_max && std::getline(cpu_max, line) && api::quota_cores(line) > 0) {
        expected = std::min(expected, api::quota_cores(line));
    }
    const json status = http_get(pd.router->port, "/status").json();
    EXPECT_EQ(status.value("worker_threads", std::size_t{0}), expected) << status.dump();
}

// The router's TCP connections to the instances that are open (ESTABLISHED) or closed by the
// instance only (CLOSE_WAIT): its sockets (/proc/PID/fd) whose peer port is an instance's.
int pooled_to(const PdCluster& pd) {
    std::set<std::string> inodes;
    const std::string fd_dir = "/proc/" + std::to_string(pd.router->proc.pid()) + "/fd";
    for (const auto& e : std::filesystem::directory_iterator(fd_dir)) {
        std::error_code ec;
        const std::string target = std::filesystem::read_symlink(e.path(), ec).string();
        if (!ec && target.rfind("socket:[", 0) == 0) {
            inodes.insert(target.substr(8, target.size() - 9));
        }
    }
    std::set<unsigned long> ports;
    for (const Server* s : pd.prefill) {
        ports.insert(s->port);
    }
    for (const Server* s : pd.decode) {
        ports.insert(s->port);
    }
    std::ifstream in("/proc/net/tcp");
    std::string line;
    std::getline(in, line);  // the header
    int n = 0;
    while (std::getline(in, line)) {
        std::istringstream fields(line);
        std::string slot, local, remote, state, queues, timer, retransmits, uid, timeout, inode;
        fields >> slot >> local >> remote >> state >> queues >> timer >> retransmits >> uid >>
            timeout >> inode;
        const auto colon = remote.find(':');
        if (colon == std::string::npos || (state != "01" && state != "08")) {
            continue;
        }
        n += ports.count(std::stoul(remote.substr(colon + 1), nullptr, 16)) != 0 &&
                     inodes.count(inode) != 0
                 ? 1
                 : 0;
    }
    return n;
}

// Every worker's pool is swept: idle connections past --upstream-idle-timeout-ms are closed by
// the health loop's tick on each worker, not only on the thread that probes.
TEST_F(ThreadsTest, IdlePooledConnectionsOfEveryWorkerAreClosed) {
    auto& pd = start(PdOptions{}.p(1).d(1).router({"--threads", std::to_string(kWorkers),
                                                   "--upstream-idle-timeout-ms", "300",
                                                   "--health-interval-ms", "100"}));
    const int before = pooled_to(pd);
    std::vector<json> bodies(32, completion_body("pool me", 3, false));
    const auto b = per_worker(*pd.router, kWorkers);
    for (const auto& a : send_at_once(*pd.router, bodies, "pool-")) {
        EXPECT_TRUE(answer_ok(a, bodies[0]));
    }
    ASSERT_GE(workers_used(b, per_worker(*pd.router, kWorkers)), 2);
    EXPECT_GT(pooled_to(pd), before + 2) << "the workers kept no connection";
    // What stays is at most the health probes' own connection to each instance.
    const int probes = std::max(before, 2);
    EXPECT_TRUE(wait_until([&] { return pooled_to(pd) <= probes; }, Ms{5000}))
        << pooled_to(pd) << " connections to the instances left, " << before << " before the load";
}

}  // namespace
}  // namespace pdr::test
