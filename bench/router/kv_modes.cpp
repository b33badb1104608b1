#include "bench/router/kv_modes.hpp"

#include "bench/router/load.hpp"
#include "bench/router/process.hpp"
#include "net/common/io.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace pdr::bench {
namespace {

struct Transport {
    std::string name;
    std::string tls;      // pdsim --kv-transports
    std::string devices;  // pdsim --kv-net-devices ("" = none given)
};

Transport transport_of(const std::string& name) {
    if (name == "shm") {
        return {"shm", "posix,self", ""};
    }
    if (name == "tcp") {
        return {"tcp", "tcp", "lo"};
    }
    throw std::runtime_error("unknown KV transport '" + name + "' (expected shm or tcp)");
}

std::string words(int n) {
    std::string s;
    for (int i = 0; i < n; ++i) {
        s += (i ? " w" : "w") + std::to_string(i);
    }
    return s;
}

std::string stream_body(const KvModesOptions& o) {
    return R"({"model":"pdsim-model","prompt":")" + words(o.prompt_tokens) + R"(","max_tokens":)" +
           std::to_string(o.max_tokens) + R"(,"stream":true})";
}

// A number field of pdsim's /debug/state (0 when absent).
std::uint64_t state_field(unsigned short port, const std::string& field) {
    return json_number(http_call(port, "GET", "/debug/state").body, field);
}

// One mode's pdsim pair and its router.
struct Pair {
    std::string mode;
    std::unique_ptr<Child> prefill, decode, router;
    // The engine whose counters time the transfers: D reads in pull mode, P writes or sends in
    // push and lmcache modes.
    unsigned short transfer_port() const {
        return mode == "pull" ? decode->port() : prefill->port();
    }
};

Pair start_pair(const KvModesOptions& o, const std::string& mode, const Transport& t,
                int size_mib) {
    const std::string pdsim = o.bin_dir + "/sim/pdsim";
    const std::string pdrouter = o.bin_dir + "/router/pdrouter";
    const std::uint64_t kv_bytes = static_cast<std::uint64_t>(size_mib) << 20;
    const std::string per_token = std::to_string(kv_bytes / static_cast<unsigned>(o.prompt_tokens));
    const std::string log = "/tmp/pdr-bench-kv-" + mode;
    std::vector<std::string> p{pdsim,
                               "--role",
                               "prefill",
                               "--log-level",
                               "warn",
                               "--prefill-delay-ms",
                               std::to_string(o.prefill_delay_ms),
                               "--kv-mode",
                               mode};
    std::vector<std::string> d{pdsim,
                               "--role",
                               "decode",
                               "--log-level",
                               "warn",
                               "--token-delay-ms",
                               std::to_string(o.token_delay_ms),
                               "--kv-mode",
                               mode};
    // Every mode moves its KV through the transfer core. One block per prompt token; the pool
    // holds the requests in flight and a margin.
    const std::string blocks =
        std::to_string(static_cast<std::size_t>(o.prompt_tokens) * (o.concurrency + 2));
    std::vector<std::string> kv{"--kv-transfer",       "pdx",     "--kv-transports", t.tls,
                                "--kv-block-bytes",    per_token, "--kv-blocks",     blocks,
                                "--block-size-tokens", "1"};
    if (!t.devices.empty()) {
        kv.insert(kv.end(), {"--kv-net-devices", t.devices});
    }
    p.insert(p.end(), kv.begin(), kv.end());
    d.insert(d.end(), kv.begin(), kv.end());
    Pair pair;
    pair.mode = mode;
    if (mode == "lmcache") {
        const std::string ready = "tcp://127.0.0.1:" + std::to_string(free_port());
        const std::string init = std::to_string(free_port());
        const std::string alloc = std::to_string(free_port());
        p.insert(p.end(), {"--kv-ready-connect", ready, "--kv-bytes-per-token", per_token});
        d.insert(d.end(), {"--lmcache-init-ports", init, "--lmcache-alloc-ports", alloc});
        pair.prefill = std::make_unique<Child>(p, log + "-prefill.log");
        pair.decode = std::make_unique<Child>(d, log + "-decode.log");
        pair.router = std::make_unique<Child>(
            std::vector<std::string>{
                pdrouter, "--kv-mode", "lmcache", "--kv-ready-bind", ready, "--prefill",
                "127.0.0.1:" + std::to_string(pair.prefill->port()), "--decode",
                "127.0.0.1:" + std::to_string(pair.decode->port()), "--lmcache-init-ports", init,
                "--lmcache-alloc-ports", alloc, "--log-level", "warn"},
            log + "-router.log");
        return pair;
    }
    d.insert(d.end(), {"--decode-setup-delay-ms", std::to_string(o.decode_setup_ms)});
    const std::string engine_id = "bench-" + mode + "-prefill";
    p.insert(p.end(), {"--engine-id", engine_id});
    pair.prefill = std::make_unique<Child>(p, log + "-prefill.log");
    pair.decode = std::make_unique<Child>(d, log + "-decode.log");
    std::vector<std::string> r{pdrouter,
                               "--prefill",
                               "127.0.0.1:" + std::to_string(pair.prefill->port()),
                               "--decode",
                               "127.0.0.1:" + std::to_string(pair.decode->port()),
                               "--log-level",
                               "warn"};
    if (mode == "push") {
        // pdsim's side channel is its HTTP port.
        r.insert(r.end(), {"--kv-mode", "push", "--prefill-engine-ids", engine_id,
                           "--prefill-side-channel-ports", std::to_string(pair.prefill->port())});
    }
    pair.router = std::make_unique<Child>(r, log + "-router.log");
    return pair;
}

struct Stats {
    std::vector<double> ttft_ms, latency_ms;
    std::size_t ok = 0, failed = 0, served = 0;  // served: measured and warm-up requests
    std::string first_error;
    double router_cpu_s = 0;
    std::uint64_t bytes = 0, us = 0;
};

void measure(const KvModesOptions& o, Pair& pair, std::size_t n, std::size_t warmup, Stats& s) {
    const unsigned short xfer = pair.transfer_port();
    const std::uint64_t b0 = state_field(xfer, "kv_transfer_bytes");
    const std::uint64_t u0 = state_field(xfer, "kv_transfer_us");
    const double c0 = pair.router->cpu_seconds();
    LoadSpec spec{{"127.0.0.1", pair.router->port()},
                  "/v1/completions",
                  stream_body(o),
                  true,
                  o.concurrency,
                  n,
                  warmup};
    spec.time_limit = Duration{120'000};
    LoadResult r = run_load(spec);
    s.router_cpu_s += pair.router->cpu_seconds() - c0;
    // The warm-up's transfers are in these deltas too: more samples of the same transfer.
    s.bytes += state_field(xfer, "kv_transfer_bytes") - b0;
    s.us += state_field(xfer, "kv_transfer_us") - u0;
    s.ok += r.ok;
    s.failed += r.failed;
    s.served += r.ok + r.failed + warmup;
    s.ttft_ms.insert(s.ttft_ms.end(), r.ttfb_ms.begin(), r.ttfb_ms.end());
    s.latency_ms.insert(s.latency_ms.end(), r.latency_ms.begin(), r.latency_ms.end());
    if (s.first_error.empty()) {
        s.first_error = r.first_error;
    }
}

}  // namespace

int run_kv_modes(const KvModesOptions& o) {
    std::printf(
        "KV modes: prompt %d tokens (one KV block each), max_tokens %d, prefill delay %d ms, "
        "decode setup delay %d ms (pull, push), decode token delay %d ms, concurrency %zu, %zu "
        "streamed requests per row in %d alternating rounds\n\n",
        o.prompt_tokens, o.max_tokens, o.prefill_delay_ms, o.decode_setup_ms, o.token_delay_ms,
        o.concurrency, o.requests, o.rounds);
    std::printf(
        "| transport | KV/request | mode | TTFT p50 ms | TTFT p99 ms | latency p50 ms | GB/s | "
        "pdrouter CPU us/req | ok | failed |\n|---|---|---|---|---|---|---|---|---|---|\n");
    std::fflush(stdout);
    bool all_ok = true;
    std::vector<std::string> verdicts;
    for (const auto& tname : o.transports) {
        const Transport t = transport_of(tname);
        for (int size : o.sizes_mib) {
            std::vector<Pair> pairs;
            for (const auto& mode : o.modes) {
                pairs.push_back(start_pair(o, mode, t, size));
            }
            std::map<std::string, Stats> stats;
            const std::size_t per_round =
                std::max<std::size_t>(1, o.requests / static_cast<std::size_t>(o.rounds));
            for (int round = 0; round < o.rounds; ++round) {
                for (Pair& pair : pairs) {
                    const std::size_t warmup = round == 0 ? 3 : 0;
                    measure(o, pair, per_round, warmup, stats[pair.mode]);
                }
            }
            for (Pair& pair : pairs) {
                const Stats& s = stats[pair.mode];
                const double gbps =
                    s.us > 0 ? static_cast<double>(s.bytes) / (static_cast<double>(s.us) * 1e3) : 0;
                const double cpu_us =
                    s.served ? s.router_cpu_s * 1e6 / static_cast<double>(s.served) : 0;
                std::printf("| %s | %d MiB | %s | %.2f | %.2f | %.2f | %.2f | %.0f | %zu | %zu |\n",
                            t.name.c_str(), size, pair.mode.c_str(), percentile(s.ttft_ms, 50),
                            percentile(s.ttft_ms, 99), percentile(s.latency_ms, 50), gbps, cpu_us,
                            s.ok, s.failed);
                if (s.failed > 0 || s.ok == 0) {
                    all_ok = false;
                    std::printf("<!-- %s first error: %s -->\n", pair.mode.c_str(),
                                s.first_error.c_str());
                }
                std::fflush(stdout);
            }
            if (stats.count("pull") && stats.count("push")) {
                const double pull = percentile(stats["pull"].ttft_ms, 50);
                const double push = percentile(stats["push"].ttft_ms, 50);
                char line[256];
                std::snprintf(line, sizeof line,
                              "- %s, %d MiB: push TTFT p50 %.2f ms vs pull %.2f ms: ratio %.3f "
                              "(%+.2f ms): push %s\n",
                              t.name.c_str(), size, push, pull, pull > 0 ? push / pull : 0,
                              push - pull, push < pull ? "lower" : "NOT lower");
                verdicts.emplace_back(line);
            }
        }
    }
    std::printf("\n");
    for (const auto& v : verdicts) {
        std::printf("%s", v.c_str());
    }
    std::printf("\nKV modes: %s\n", all_ok ? "every request succeeded" : "FAILED requests");
    return all_ok ? 0 : 1;
}

}  // namespace pdr::bench
