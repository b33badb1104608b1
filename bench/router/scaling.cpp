#include "bench/router/scaling.hpp"

#include "bench/router/load.hpp"
#include "bench/router/process.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <thread>

namespace pdr::bench {

namespace {

std::string request_body(const ScalingOptions& o, bool stream) {
    std::string prompt;
    for (int i = 0; i < 64; ++i) {
        prompt += "word" + std::to_string(i) + " ";
    }
    return R"({"model":"pdsim-model","prompt":")" + prompt + R"(","max_tokens":)" +
           std::to_string(o.max_tokens) + (stream ? R"(,"stream":true})" : R"(,"stream":false})");
}

// `spec` split between `threads` generator threads, each with its own io_context; the results
// merged (seconds: the longest thread's).
LoadResult run_parallel(const LoadSpec& spec, int threads) {
    std::vector<LoadResult> parts(static_cast<std::size_t>(threads));
    std::vector<std::thread> runners;
    for (int i = 0; i < threads; ++i) {
        LoadSpec s = spec;
        s.concurrency = std::max<std::size_t>(spec.concurrency / threads, 1);
        s.requests = std::max<std::size_t>(spec.requests / threads, 1);
        s.warmup = spec.warmup / threads;
        runners.emplace_back([s, &parts, i] { parts[static_cast<std::size_t>(i)] = run_load(s); });
    }
    for (auto& t : runners) {
        t.join();
    }
    LoadResult all;
    for (auto& p : parts) {
        all.ok += p.ok;
        all.failed += p.failed;
        all.seconds = std::max(all.seconds, p.seconds);
        all.latency_ms.insert(all.latency_ms.end(), p.latency_ms.begin(), p.latency_ms.end());
        if (all.first_error.empty()) {
            all.first_error = p.first_error;
        }
    }
    return all;
}

// pdrouter_shared_lock_waits_total{how="block"} from the router's /metrics (-1 when it cannot
// be read): the waits that slept in the kernel.
double lock_waits(unsigned short port) {
    const HttpAnswer m = http_call(port, "GET", "/metrics");
    for (const std::string name : {"\npdrouter_shared_lock_waits_total{how=\"block\"} ",
                                   "\npdrouter_shared_lock_waits_total "}) {
        const auto at = m.body.find(name);
        if (m.status == 200 && at != std::string::npos) {
            return std::strtod(m.body.c_str() + at + name.size(), nullptr);
        }
    }
    return -1;
}

}  // namespace

int run_scaling(const ScalingOptions& o) {
    const std::string pdsim = o.bin_dir + "/sim/pdsim";
    const std::string pdrouter = o.bin_dir + "/router/pdrouter";
    std::vector<std::unique_ptr<Child>> prefill, decode;
    std::vector<std::string> router_args{pdrouter, "--log-level", "warn", "--prefill"};
    std::vector<std::string> kv_transfer;
    if (!o.sim_kv_transfer.empty()) {
        kv_transfer = {"--kv-transfer", o.sim_kv_transfer};
    }
    for (int i = 0; i < o.engines; ++i) {
        std::vector<std::string> args{pdsim, "--role",      "prefill", "--kv-lease-seconds",
                                      "5",   "--log-level", "warn"};
        args.insert(args.end(), kv_transfer.begin(), kv_transfer.end());
        prefill.push_back(std::make_unique<Child>(
            args, "/tmp/pdr-scaling-prefill-" + std::to_string(i) + ".log"));
        router_args.push_back("127.0.0.1:" + std::to_string(prefill.back()->port()));
    }
    router_args.push_back("--decode");
    for (int i = 0; i < o.engines; ++i) {
        std::vector<std::string> args{
            pdsim,         "--role", "decode", "--token-delay-ms", std::to_string(o.token_delay_ms),
            "--log-level", "warn"};
        args.insert(args.end(), kv_transfer.begin(), kv_transfer.end());
        decode.push_back(
            std::make_unique<Child>(args, "/tmp/pdr-scaling-decode-" + std::to_string(i) + ".log"));
        router_args.push_back("127.0.0.1:" + std::to_string(decode.back()->port()));
    }
    std::printf(
        "pdrouter_bench --scaling: %d prefill + %d decode pdsim, %zu requests in flight from %d "
        "load threads, %zu requests per row, max_tokens %d, decode token delay %d ms, %u CPUs\n\n",
        o.engines, o.engines, o.concurrency, o.load_threads, o.requests, o.max_tokens,
        o.token_delay_ms, std::thread::hardware_concurrency());
    std::printf(
        "| answer | --threads | req/s | router cores busy | router CPU us/req | req/s per router "
        "core | events/s | events/s per router core | blocking lock waits per 1000 req | p50 ms | "
        "p99 ms | "
        "failed |\n");
    std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    std::fflush(stdout);
    bool all_ok = true;
    for (bool stream : o.answers) {
        for (int t : o.threads) {
            std::vector<std::string> args = router_args;
            args.push_back("--threads");
            args.push_back(std::to_string(t));
            Child router(args, "/tmp/pdr-scaling-router.log");
            LoadSpec spec{{"127.0.0.1", router.port()},
                          "/v1/completions",
                          request_body(o, stream),
                          stream,
                          o.concurrency,
                          o.requests,
                          0};
            // Warm-up: the router's and the generators' connection pools.
            LoadSpec warm = spec;
            warm.requests = std::max<std::size_t>(o.requests / 10, o.concurrency);
            run_parallel(warm, o.load_threads);
            const double w0 = lock_waits(router.port());
            const double c0 = router.cpu_seconds();
            const LoadResult r = run_parallel(spec, o.load_threads);
            const double cpu = router.cpu_seconds() - c0;
            const double w1 = lock_waits(router.port());
            const double cores = r.seconds > 0 ? cpu / r.seconds : 0;
            const double served = static_cast<double>(r.ok + r.failed);
            const double us_per_req = served > 0 ? cpu * 1e6 / served : -1;
            const double events = stream ? r.rps() * o.max_tokens : 0;
            const double waits_per_k =
                w0 >= 0 && w1 >= 0 && served > 0 ? (w1 - w0) * 1000 / served : -1;
            std::printf(
                "| %s | %d | %.0f | %.2f | %.0f | %.0f | %s | %s | %.1f | %.2f | %.2f | %zu |\n",
                stream ? "stream" : "json", t, r.rps(), cores, us_per_req,
                cores > 0 ? r.rps() / cores : 0,
                stream ? std::to_string(static_cast<long long>(events)).c_str() : "-",
                stream && cores > 0 ? std::to_string(static_cast<long long>(events / cores)).c_str()
                                    : "-",
                waits_per_k, percentile(r.latency_ms, 50), percentile(r.latency_ms, 99), r.failed);
            if (r.failed > 0) {
                std::printf("<!-- first error: %s -->\n", r.first_error.c_str());
            }
            std::fflush(stdout);
            all_ok = all_ok && r.failed == 0;
        }
    }
    std::printf("\n%s\n", all_ok ? "scaling: every request succeeded" : "scaling: requests FAILED");
    return all_ok ? 0 : 1;
}

}  // namespace pdr::bench
