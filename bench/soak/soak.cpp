// pdrouter_soak: pdsim 2P2D behind pdrouter (pull mode, the router's transfer agent on, real KV
// bytes through the transfer core) under mixed stream and non-stream load with faults injected
// for a bounded time, then checks that the router came back to where it started.
//
//   pdrouter_soak [--bin-dir DIR] [--seconds 60] [--warmup-seconds 10] [--interval-seconds 10]
//                 [--concurrency 8] [--settle-seconds 10] [--max-rss-growth 0.10]
//                 [--kv-transports posix,self] [--log-dir /tmp] [--log-level warn]
//
// Load: `concurrency` closed-loop clients; every second request streams, and one stream in
// seven is dropped by its client after the first event. Faults, one every 2 s in rotation:
// a decode answers 500, a decode answers 400, a decode closes a stream after two events, a
// prefill answers 500, a decode closes without answering, a prefill closes without answering.
// At 40 % of the run one decode is killed (SIGKILL) and restarted on its port 3 s later.
//
// Warm-up runs the same load and faults (no kill); the router's RSS and open fds are then read
// with no request in flight, and again after the run has settled. Every interval prints its
// outcomes by class, p99 latency of the successful requests, the router's RSS and fds and the
// blocks the prefills hold.
//
// Fails (exit 1) when: the router exits; a client waits out its 30 s timeout (a hang); an
// interval completes no request; RSS grows by more than --max-rss-growth; the router holds more
// fds than after warm-up; a prefill still holds KV blocks --settle-seconds after the load
// stopped (stranded: pdsim's lease is 30 s, so only the router's releases and aborts free them
// in time).
#include "bench/router/process.hpp"
#include "net/upstream/client.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace {

using pdr::bench::Child;
using pdr::bench::http_call;
using pdr::bench::json_number;
using SteadyClock = std::chrono::steady_clock;

struct Options {
    std::string bin_dir = ".";
    int seconds = 60;
    int warmup_seconds = 10;
    int interval_seconds = 10;
    std::size_t concurrency = 8;
    int settle_seconds = 10;
    double max_rss_growth = 0.10;
    std::string transports = "posix,self";
    std::string log_dir = "/tmp";
    std::string log_level = "warn";  // the children's
};

// What became of one client request.
struct Interval {
    std::map<std::string, std::size_t> outcomes;  // class -> count
    std::vector<double> ok_ms;                    // latency of the successful ones
};

class Tally {
public:
    void add(const std::string& outcome, double ms) {
        std::lock_guard lock(mu_);
        auto& i = current_;
        ++i.outcomes[outcome];
        if (outcome == "ok") {
            i.ok_ms.push_back(ms);
        }
    }
    Interval take() {
        std::lock_guard lock(mu_);
        return std::exchange(current_, {});
    }

private:
    std::mutex mu_;
    Interval current_;
};

const char* const kBody = R"({"model":"pdsim-model","prompt":"the soak test prompt has a few words)"
                          R"( in it","max_tokens":8)";

pdr::upstream::Request make_request(bool stream) {
    pdr::upstream::Request req{pdr::http::verb::post, "/v1/completions", 11};
    req.set(pdr::http::field::content_type, "application/json");
    req.keep_alive(true);
    req.body() = std::string(kBody) + (stream ? R"(,"stream":true})" : "}");
    return req;
}

std::string failure_class(pdr::upstream::Failure f) {
    using pdr::upstream::Failure;
    if (f == Failure::ResponseTimeout || f == Failure::IdleTimeout) {
        return "client_timeout";
    }
    return "transport_" + std::string(pdr::upstream::to_string(f));
}

std::string status_class(unsigned status) {
    return "http_" + std::to_string(status);
}

struct Load {
    pdr::upstream::Client& client;
    pdr::upstream::Endpoint target;
    Tally& tally;
    std::atomic<bool>& stop;
    std::size_t next = 0;
};

pdr::awaitable<void> client_loop(Load& load) {
    const pdr::upstream::Timeouts timeouts{pdr::Duration{5'000}, pdr::Duration{30'000},
                                           pdr::Duration{30'000}};
    while (!load.stop.load()) {
        const std::size_t n = load.next++;
        const bool stream = n % 2 == 1;
        const bool drop = stream && n % 7 == 3;
        const auto t0 = SteadyClock::now();
        std::string outcome;
        if (stream) {
            auto opened = co_await load.client.open(load.target, make_request(true), timeouts);
            if (!opened.stream) {
                outcome = failure_class(opened.failure);
            } else if (opened.stream->status() != 200) {
                std::string ignored;
                co_await opened.stream->read_all(ignored);
                outcome = status_class(opened.stream->status());
            } else {
                std::string body;
                auto f = pdr::upstream::Failure::None;
                while (!opened.stream->done() && f == pdr::upstream::Failure::None) {
                    f = co_await opened.stream->read_some(body);
                    if (drop && body.find("\n\n") != std::string::npos) {
                        opened.stream->cancel();
                        break;
                    }
                }
                if (drop) {
                    outcome = "client_dropped_stream";
                } else if (f != pdr::upstream::Failure::None) {
                    outcome = failure_class(f);
                } else if (body.find("[DONE]") != std::string::npos) {
                    outcome = "ok";
                } else if (body.find("\"error\"") != std::string::npos) {
                    outcome = "stream_error_event";
                } else {
                    outcome = "stream_without_done";
                }
            }
        } else {
            auto res = co_await load.client.request(load.target, make_request(false), timeouts);
            if (!res.ok()) {
                outcome = failure_class(res.failure);
            } else if (res.response.result_int() == 200) {
                outcome = "ok";
            } else {
                outcome = status_class(res.response.result_int());
            }
        }
        load.tally.add(outcome,
                       std::chrono::duration<double, std::milli>(SteadyClock::now() - t0).count());
    }
}

// Runs the load on its own thread until stop() returns.
class LoadThread {
public:
    LoadThread(unsigned short port, std::size_t concurrency, Tally& tally) {
        thread_ = std::thread([this, port, concurrency, &tally] {
            pdr::net::io_context io;
            pdr::upstream::PoolLimits limits;
            limits.max_idle_per_endpoint = concurrency * 2;
            pdr::upstream::Client client(io.get_executor(), limits);
            Load load{client, {"127.0.0.1", port}, tally, stop_};
            for (std::size_t i = 0; i < concurrency; ++i) {
                pdr::net::co_spawn(io, client_loop(load), pdr::net::detached);
            }
            io.run();
        });
    }
    // Lets every client finish its request in flight (each is bounded by its 30 s timeouts).
    void stop() {
        stop_ = true;
        if (thread_.joinable()) {
            thread_.join();
        }
    }
    ~LoadThread() { stop(); }

private:
    std::atomic<bool> stop_{false};
    std::thread thread_;
};

struct Cluster {
    std::vector<std::unique_ptr<Child>> prefills, decodes;
    std::vector<std::vector<std::string>> decode_argv;
    std::vector<unsigned short> decode_ports;
    std::unique_ptr<Child> router;
};

std::vector<std::string> pdsim_argv(const Options& o, const std::string& role) {
    return {o.bin_dir + "/sim/pdsim",
            "--role",
            role,
            "--log-level",
            o.log_level,
            "--kv-transfer",
            "pdx",
            "--kv-transports",
            o.transports,
            "--token-delay-ms",
            "2",
            "--prefill-delay-ms",
            "2"};
}

Cluster start(const Options& o) {
    Cluster c;
    for (int i = 0; i < 2; ++i) {
        auto argv = pdsim_argv(o, "prefill");
        argv.insert(argv.end(), {"--engine-id", "soak-prefill-" + std::to_string(i)});
        c.prefills.push_back(std::make_unique<Child>(
            argv, o.log_dir + "/pdr-soak-prefill-" + std::to_string(i) + ".log"));
    }
    for (int i = 0; i < 2; ++i) {
        // A fixed port, so that the decode killed during the run comes back where the router
        // expects it.
        const unsigned short port = pdr::bench::free_port();
        auto argv = pdsim_argv(o, "decode");
        argv.insert(argv.end(), {"--port", std::to_string(port)});
        c.decode_argv.push_back(argv);
        c.decode_ports.push_back(port);
        c.decodes.push_back(std::make_unique<Child>(
            argv, o.log_dir + "/pdr-soak-decode-" + std::to_string(i) + ".log", port));
    }
    std::vector<std::string> r{
        o.bin_dir + "/router/pdrouter", "--log-level", o.log_level, "--transfer-agent",
        "--transfer-agent-transports",  o.transports,  "--prefill"};
    for (auto& p : c.prefills) {
        r.push_back("127.0.0.1:" + std::to_string(p->port()));
    }
    r.push_back("--decode");
    for (auto port : c.decode_ports) {
        r.push_back("127.0.0.1:" + std::to_string(port));
    }
    c.router = std::make_unique<Child>(r, o.log_dir + "/pdr-soak-router.log");
    return c;
}

// The fault rotation: (target, plan).
struct Fault {
    bool decode;
    const char* plan;
};
const Fault kFaults[] = {
    {true, R"({"status":500,"count":2})"},
    {true, R"({"status":400,"count":2})"},
    {true, R"({"close_after_chunks":2,"count":2})"},
    {false, R"({"status":500,"count":2})"},
    {true, R"({"close_before_response":true,"count":1})"},
    {false, R"({"close_before_response":true,"count":1})"},
};

std::uint64_t blocks_held(const Cluster& c) {
    std::uint64_t held = 0;
    for (const auto& p : c.prefills) {
        held += json_number(http_call(p->port(), "GET", "/debug/state").body, "blocks_held");
    }
    return held;
}

std::uint64_t prefill_sum(const Cluster& c, const std::string& field) {
    std::uint64_t sum = 0;
    for (const auto& p : c.prefills) {
        sum += json_number(http_call(p->port(), "GET", "/debug/state").body, field);
    }
    return sum;
}

// Drives the faults (and, when `kill_at` is set, the decode kill and restart) until `end`.
class FaultDriver {
public:
    FaultDriver(const Options& o, Cluster& c) : o_(o), c_(c) {}

    // `kill_at`: never when it is time_point::max().
    void run_until(SteadyClock::time_point end, SteadyClock::time_point kill_at,
                   const std::function<void()>& each_tick) {
        constexpr auto never = SteadyClock::time_point::max();
        started_ = SteadyClock::now();
        auto next_fault = started_;
        auto restart_at = never;
        while (SteadyClock::now() < end) {
            const auto now = SteadyClock::now();
            if (now >= next_fault) {
                inject();
                next_fault = now + std::chrono::seconds(2);
            }
            if (now >= kill_at) {
                ::kill(c_.decodes[1]->pid(), SIGKILL);
                c_.decodes[1].reset();  // reaps it
                std::printf("  [%s] decode 1 killed\n", stamp().c_str());
                kill_at = never;
                restart_at = now + std::chrono::seconds(3);
            }
            if (now >= restart_at) {
                c_.decodes[1] = std::make_unique<Child>(
                    c_.decode_argv[1], o_.log_dir + "/pdr-soak-decode-1-restarted.log",
                    c_.decode_ports[1]);
                std::printf("  [%s] decode 1 restarted\n", stamp().c_str());
                restart_at = never;
            }
            each_tick();
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
        }
    }

private:
    void inject() {
        const Fault& f = kFaults[turn_ % std::size(kFaults)];
        const auto& side = f.decode ? c_.decodes : c_.prefills;
        const auto& target = side[(turn_ / std::size(kFaults)) % side.size()];
        ++turn_;
        if (target) {  // not while that decode is down
            http_call(target->port(), "POST", "/debug/faults", f.plan);
        }
    }
    // Seconds since this phase began.
    std::string stamp() const {
        return "t+" +
               std::to_string(
                   std::chrono::duration_cast<std::chrono::seconds>(SteadyClock::now() - started_)
                       .count()) +
               " s";
    }

    const Options& o_;
    Cluster& c_;
    std::size_t turn_ = 0;
    SteadyClock::time_point started_;
};

double p99(std::vector<double> v) {
    if (v.empty()) {
        return 0;
    }
    std::sort(v.begin(), v.end());
    return v[std::min(v.size() - 1,
                      static_cast<std::size_t>(0.99 * static_cast<double>(v.size())))];
}

std::string outcomes_text(const std::map<std::string, std::size_t>& m) {
    std::string s;
    for (const auto& [k, n] : m) {
        s += (s.empty() ? "" : " ") + k + "=" + std::to_string(n);
    }
    return s.empty() ? "none" : s;
}

int run(const Options& o) {
    Cluster c = start(o);
    Tally tally;
    FaultDriver faults(o, c);
    std::printf(
        "pdrouter_soak: 2P2D pull mode with the router's transfer agent (%s), %zu clients, "
        "%d s warm-up, %d s run\n",
        o.transports.c_str(), o.concurrency, o.warmup_seconds, o.seconds);

    {  // Warm-up: same load and faults, no kill.
        LoadThread load(c.router->port(), o.concurrency, tally);
        faults.run_until(SteadyClock::now() + std::chrono::seconds(o.warmup_seconds),
                         SteadyClock::time_point::max(), [] {});
        load.stop();
    }
    const Interval warm = tally.take();
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    const double rss0 = c.router->rss_mib();
    const std::size_t fds0 = c.router->open_fds();
    const std::uint64_t expired0 = prefill_sum(c, "freed_by_expiry");
    std::printf("after warm-up (%s): router RSS %.1f MiB, %zu fds\n",
                outcomes_text(warm.outcomes).c_str(), rss0, fds0);
    std::printf("%-9s %-8s %-9s %-9s %-6s %s\n", "interval", "p99 ms", "RSS MiB", "fds", "held",
                "outcomes");

    std::vector<std::string> failures;
    std::map<std::string, std::size_t> total;
    int interval = 0;
    auto interval_end = SteadyClock::now() + std::chrono::seconds(o.interval_seconds);
    auto report = [&] {
        Interval i = tally.take();
        ++interval;
        std::size_t ok = i.outcomes.count("ok") ? i.outcomes.at("ok") : 0;
        for (const auto& [k, n] : i.outcomes) {
            total[k] += n;
        }
        std::printf("%-9d %-8.1f %-9.1f %-9zu %-6llu %s\n", interval, p99(i.ok_ms),
                    c.router->rss_mib(), c.router->open_fds(),
                    static_cast<unsigned long long>(blocks_held(c)),
                    outcomes_text(i.outcomes).c_str());
        std::fflush(stdout);
        if (ok == 0) {
            failures.push_back("interval " + std::to_string(interval) + " completed no request");
        }
    };
    {
        LoadThread load(c.router->port(), o.concurrency, tally);
        const auto t0 = SteadyClock::now();
        const auto end = t0 + std::chrono::seconds(o.seconds);
        const auto kill_at = t0 + std::chrono::milliseconds(o.seconds * 400);
        faults.run_until(end, kill_at, [&] {
            if (SteadyClock::now() >= interval_end) {
                report();
                interval_end += std::chrono::seconds(o.interval_seconds);
            }
        });
        load.stop();
    }
    report();  // the requests that were in flight at the end

    if (!c.router->running()) {
        failures.push_back("the router exited; see " + o.log_dir + "/pdr-soak-router.log");
        for (const auto& f : failures) {
            std::printf("soak: FAIL: %s\n", f.c_str());
        }
        return 1;
    }
    // Settle: no load; the prefills' blocks must all be freed, fds back to the warm-up count.
    const auto settle_end = SteadyClock::now() + std::chrono::seconds(o.settle_seconds);
    std::uint64_t held = blocks_held(c);
    std::size_t fds1 = c.router->open_fds();
    while ((held > 0 || fds1 > fds0) && SteadyClock::now() < settle_end) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        held = blocks_held(c);
        fds1 = c.router->open_fds();
    }
    const double rss1 = c.router->rss_mib();
    const std::uint64_t expired = prefill_sum(c, "freed_by_expiry") - expired0;
    const auto health = http_call(c.router->port(), "GET", "/health");
    std::printf(
        "after the run: router RSS %.1f MiB (%+.1f %%), %zu fds (%+lld), %llu blocks held "
        "on the prefills, %llu handles freed by lease expiry, /health %d\n",
        rss1, rss0 > 0 ? (rss1 / rss0 - 1) * 100 : 0.0, fds1,
        static_cast<long long>(fds1) - static_cast<long long>(fds0),
        static_cast<unsigned long long>(held), static_cast<unsigned long long>(expired),
        health.status);
    std::printf("outcomes over the run: %s\n", outcomes_text(total).c_str());

    if (total.count("client_timeout")) {
        failures.push_back(std::to_string(total["client_timeout"]) +
                           " client requests waited out their 30 s timeout");
    }
    if (rss1 > rss0 * (1 + o.max_rss_growth)) {
        failures.push_back("router RSS grew from " + std::to_string(rss0) + " to " +
                           std::to_string(rss1) + " MiB");
    }
    if (fds1 > fds0) {
        failures.push_back("router fds grew from " + std::to_string(fds0) + " to " +
                           std::to_string(fds1));
    }
    if (held > 0) {
        failures.push_back(std::to_string(held) + " KV blocks still held on the prefills " +
                           std::to_string(o.settle_seconds) + " s after the load stopped");
    }
    if (health.status != 200) {
        failures.push_back("/health answered " + std::to_string(health.status));
    }
    for (const auto& f : failures) {
        std::printf("soak: FAIL: %s\n", f.c_str());
    }
    if (failures.empty()) {
        std::printf("soak: PASS\n");
    }
    return failures.empty() ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
    Options o;
    auto need = [&](int& i) -> std::string {
        if (i + 1 >= argc) {
            std::fprintf(stderr, "pdrouter_soak: %s needs a value\n", argv[i]);
            std::exit(2);
        }
        return argv[++i];
    };
    try {
        for (int i = 1; i < argc; ++i) {
            const std::string a = argv[i];
            if (a == "--bin-dir") {
                o.bin_dir = need(i);
            } else if (a == "--seconds") {
                o.seconds = std::stoi(need(i));
            } else if (a == "--warmup-seconds") {
                o.warmup_seconds = std::stoi(need(i));
            } else if (a == "--interval-seconds") {
                o.interval_seconds = std::stoi(need(i));
            } else if (a == "--concurrency") {
                o.concurrency = std::stoul(need(i));
            } else if (a == "--settle-seconds") {
                o.settle_seconds = std::stoi(need(i));
            } else if (a == "--max-rss-growth") {
                o.max_rss_growth = std::stod(need(i));
            } else if (a == "--kv-transports") {
                o.transports = need(i);
            } else if (a == "--log-dir") {
                o.log_dir = need(i);
            } else if (a == "--log-level") {
                o.log_level = need(i);
            } else {
                std::fprintf(stderr, "pdrouter_soak: unknown argument '%s'\n", a.c_str());
                return 2;
            }
        }
        if (o.seconds < 1 || o.seconds > 86'400 || o.warmup_seconds < 0 || o.interval_seconds < 1 ||
            o.concurrency < 1 || o.concurrency > 1024) {
            std::fprintf(stderr, "pdrouter_soak: a value is out of range\n");
            return 2;
        }
        return run(o);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "pdrouter_soak: %s\n", e.what());
        return 2;
    }
}
