// pdrouter_bench: starts pdsim 1P1D and pdrouter as separate processes and measures, in one run,
// the same load sent directly to the decode instance and through pdrouter (which adds the
// prefill leg and the KV handover). Prints a Markdown table and the targets' verdicts.
//
//   pdrouter_bench [--bin-dir DIR] [--concurrency 32] [--requests 3000] [--max-tokens 16]
//                  [--delays 0,10] [--answers json,stream] [--nginx PATH|none] [--quick]
//                  [--floor PATH|none]
//                  [--repeat N] [--lmcache] [--router-threads 1] [--sim-kv-transfer pdx|http]
//   pdrouter_bench [--bin-dir DIR] --scaling 1,2,4,8 [--scaling-engines 4]
//                  [--scaling-load-threads 4] [--concurrency 256] [--requests N]
//                  [--answers json,stream] [--delays D] [--max-tokens 16]
//   pdrouter_bench [--bin-dir DIR] --kv-modes pull,push,lmcache|--push [--kv-sizes 1,16,64]
//                  [--kv-transports shm,tcp] [--kv-requests 40] [--kv-concurrency 1]
//                  [--kv-rounds 2] [--prefill-delay-ms 20] [--decode-setup-delay-ms 10]
//                  [--kv-token-delay-ms 2]
//
// --lmcache also runs an LMCache pair (pdsim --kv-mode lmcache, pdrouter --kv-mode lmcache with
// its ZMQ KV-ready socket) beside the pull-mode pair, alternating with the pull rows, and prints
// its CPU per request and its TTFB against pull mode's in the same run.
//
// --kv-modes pull,push,lmcache (or --push for all three) runs the KV modes side by side instead
// (bench/router/kv_modes.hpp): per transport (--kv-transports shm,tcp) and KV size per request
// (--kv-sizes 1,16,64 MiB), TTFT p50/p99, latency p50, transfer GB/s and router CPU per request,
// with pdsim moving and verifying real bytes; --kv-requests, --kv-concurrency, --kv-rounds,
// --prefill-delay-ms and --kv-token-delay-ms shape it. Exits 1 when a request failed.
//
// --router-threads N: pdrouter's --threads in the table rows (default 1: nginx runs one worker,
// and CPU per request is compared at one thread each). --scaling: see bench/router/scaling.hpp.
//
// --repeat N runs each nginx-hop and pdrouter row N times, alternating, prints every run, and
// judges the CPU target on the median (the spread between single runs on a shared 2-core VM is
// about +-15 %, as large as the margins being judged).
// Reference: when nginx is installed (Debian `nginx-light`; `--nginx none` skips it), the same
// load also goes through one nginx proxy hop (one worker, keep-alive upstream, unbuffered) to
// the decode instance, and nginx's CPU per request is printed beside pdrouter's: the cost of a
// plain single-hop proxy on this machine under the same load.
//
// Floor: when `<bin-dir>/bench/router/pdr_floor_relay` is built (--floor PATH|none), the same
// load also goes through it (floor_relay.cpp: the three exchanges of a P/D request on pdrouter's
// platform and nothing else), and its CPU per request is printed beside the others: §5's floor
// measured in the same run, so that pdrouter's ratio to nginx splits into the platform's and
// the product's parts.
#include "bench/router/kv_modes.hpp"
#include "bench/router/load.hpp"
#include "bench/router/process.hpp"
#include "bench/router/scaling.hpp"

#include <sys/stat.h>
#include <unistd.h>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

namespace {

using pdr::bench::Child;
using pdr::bench::LoadResult;
using pdr::bench::LoadSpec;
using pdr::bench::percentile;

struct Options {
    std::string bin_dir = ".";
    std::size_t concurrency = 32;
    std::size_t requests = 3000;
    int max_tokens = 16;
    std::vector<int> delays{0, 10};
    std::vector<bool> answers{false, true};  // stream?
    std::string nginx = "/usr/sbin/nginx";   // "none": no reference rows
    std::string floor;                       // the floor relay; "": the bin-dir's; "none"
    int repeat = 1;                          // runs of each nginx-hop and pdrouter row
    bool lmcache = false;                    // also the lmcache-mode pair
    pdr::bench::KvModesOptions kv;           // --kv-modes: the KV modes side by side
    bool kv_modes = false;
    int router_threads = 1;       // pdrouter --threads in the table rows (nginx runs one worker)
    std::string sim_kv_transfer;  // pdsim --kv-transfer (pdx|http); "": pdsim's default
    pdr::bench::ScalingOptions scaling;  // --scaling: throughput against --threads
    bool scale = false;
};

std::vector<std::string> split(const std::string& list) {
    std::vector<std::string> out;
    std::stringstream ss(list);
    std::string item;
    while (std::getline(ss, item, ',')) {
        if (!item.empty()) {
            out.push_back(item);
        }
    }
    return out;
}

double median(std::vector<double> v) {
    if (v.empty()) {
        return -1;
    }
    std::sort(v.begin(), v.end());
    const std::size_t m = v.size() / 2;
    return v.size() % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
}

std::string join_us(const std::vector<double>& v) {
    std::string out;
    for (double x : v) {
        out += (out.empty() ? "" : ", ") + std::to_string(static_cast<int>(x));
    }
    return out;
}

std::string prompt_text() {
    std::string p;
    for (int i = 0; i < 64; ++i) {
        p += "word" + std::to_string(i) + " ";
    }
    return p;
}

std::string body(const Options& o, bool stream) {
    return R"({"model":"pdsim-model","prompt":")" + prompt_text() + R"(","max_tokens":)" +
           std::to_string(o.max_tokens) + (stream ? R"(,"stream":true})" : R"(,"stream":false})");
}

// What pdrouter sends to the prefill instance: the cost of the prefill leg on its own.
std::string prefill_body() {
    return R"({"model":"pdsim-model","prompt":")" + prompt_text() +
           R"(","max_tokens":1,"stream":false,"kv_transfer_params":{"do_remote_decode":true,)"
           R"("do_remote_prefill":false,"remote_engine_id":null,"remote_block_ids":null,)"
           R"("remote_host":null,"remote_port":null}})";
}

struct Row {
    std::string label;
    int delay = 0;
    bool stream = false;
    LoadResult result;
    double cpu_us_per_req = -1;
};

// A row through `proc` (pdrouter, the floor relay, the LMCache pair's router), its CPU per request
// counted over the row and the warm-up that runs inside it (`warmup` requests).
Row measured_row(const Child& proc, const char* label, int delay, bool stream, const LoadSpec& spec,
                 std::size_t warmup) {
    const double c0 = proc.cpu_seconds();
    Row r{label, delay, stream, pdr::bench::run_load(spec)};
    const double c1 = proc.cpu_seconds();
    const std::size_t served = r.result.ok + r.result.failed + warmup;
    r.cpu_us_per_req = served ? (c1 - c0) * 1e6 / static_cast<double>(served) : -1;
    return r;
}

void print_row(const Row& r) {
    std::printf("| %-7s | %-10s | %2d ms | %8.0f | %7.2f | %7.2f | %7.2f | %7.2f | %s | %zu |\n",
                r.stream ? "stream" : "json", r.label.c_str(), r.delay, r.result.rps(),
                percentile(r.result.latency_ms, 50), percentile(r.result.latency_ms, 99),
                percentile(r.result.ttfb_ms, 50), percentile(r.result.ttfb_ms, 99),
                r.cpu_us_per_req < 0 ? "      -"
                                     : std::to_string(static_cast<int>(r.cpu_us_per_req)).c_str(),
                r.result.failed);
    if (r.result.failed > 0) {
        std::printf("<!-- first error: %s -->\n", r.result.first_error.c_str());
    }
    std::fflush(stdout);
}

// One nginx worker in the foreground proxying 127.0.0.1:`listen` to the decode instance, with a
// keep-alive upstream pool and unbuffered responses (streams relayed as they come).
std::unique_ptr<Child> start_nginx(const Options& o, unsigned short decode_port) {
    if (o.nginx == "none" || ::access(o.nginx.c_str(), X_OK) != 0) {
        return nullptr;
    }
    const std::string dir = "/tmp/pdr-bench-nginx-" + std::to_string(::getpid());
    ::mkdir(dir.c_str(), 0755);
    const unsigned short listen = pdr::bench::free_port();
    std::ofstream conf(dir + "/nginx.conf");
    conf << "worker_processes 1;\ndaemon off;\nmaster_process off;\n"
         << "error_log " << dir << "/error.log warn;\npid " << dir << "/nginx.pid;\n"
         << "events { worker_connections 4096; }\n"
         << "http {\n  access_log off;\n"
         << "  client_body_temp_path " << dir << "/body;\n"
         << "  proxy_temp_path " << dir << "/proxy;\n"
         << "  fastcgi_temp_path " << dir << "/fastcgi;\n"
         << "  uwsgi_temp_path " << dir << "/uwsgi;\n"
         << "  scgi_temp_path " << dir << "/scgi;\n"
         << "  upstream decode { server 127.0.0.1:" << decode_port << "; keepalive 64; }\n"
         << "  server {\n    listen 127.0.0.1:" << listen << ";\n"
         << "    location / {\n      proxy_pass http://decode;\n"
         << "      proxy_http_version 1.1;\n      proxy_set_header Connection \"\";\n"
         << "      proxy_buffering off;\n    }\n  }\n}\n";
    conf.close();
    return std::make_unique<Child>(
        std::vector<std::string>{o.nginx, "-p", dir, "-c", dir + "/nginx.conf"},
        "/tmp/pdr-bench-nginx.log", listen);
}

// The 1/5/15 min load averages, to note the machine's state beside the numbers.
std::string load_average() {
    std::ifstream in("/proc/loadavg");
    std::string one, five, fifteen;
    in >> one >> five >> fifteen;
    return one + " " + five + " " + fifteen;
}

Options parse(int argc, char** argv) {
    Options o;
    for (int i = 1; i < argc; ++i) {
        std::string a = argv[i];
        auto next = [&]() -> std::string {
            if (i + 1 >= argc) {
                std::fprintf(stderr, "pdrouter_bench: %s needs a value\n", a.c_str());
                std::exit(2);
            }
            return argv[++i];
        };
        if (a == "--bin-dir") {
            o.bin_dir = next();
        } else if (a == "--concurrency") {
            o.concurrency = std::stoul(next());
        } else if (a == "--requests") {
            o.requests = std::stoul(next());
        } else if (a == "--max-tokens") {
            o.max_tokens = std::stoi(next());
        } else if (a == "--delays") {
            o.delays.clear();
            std::stringstream ss(next());
            std::string d;
            while (std::getline(ss, d, ',')) {
                o.delays.push_back(std::stoi(d));
            }
        } else if (a == "--answers") {
            o.answers.clear();
            std::stringstream ss(next());
            std::string d;
            while (std::getline(ss, d, ',')) {
                o.answers.push_back(d == "stream");
            }
        } else if (a == "--nginx") {
            o.nginx = next();
        } else if (a == "--floor") {
            o.floor = next();
        } else if (a == "--repeat") {
            o.repeat = std::stoi(next());
            if (o.repeat < 1 || o.repeat > 20) {
                std::fprintf(stderr, "pdrouter_bench: --repeat must be 1..20\n");
                std::exit(2);
            }
        } else if (a == "--lmcache") {
            o.lmcache = true;
        } else if (a == "--kv-modes" || a == "--push") {
            o.kv_modes = true;
            if (a == "--kv-modes") {
                o.kv.modes = split(next());
            }
            for (const auto& m : o.kv.modes) {
                if (m != "pull" && m != "push" && m != "lmcache") {
                    std::fprintf(stderr, "pdrouter_bench: --kv-modes: unknown mode %s\n",
                                 m.c_str());
                    std::exit(2);
                }
            }
        } else if (a == "--kv-sizes") {
            o.kv.sizes_mib.clear();
            for (const auto& v : split(next())) {
                const int mib = std::stoi(v);
                if (mib < 1 || mib > 1024) {
                    std::fprintf(stderr, "pdrouter_bench: --kv-sizes: 1..1024 MiB each\n");
                    std::exit(2);
                }
                o.kv.sizes_mib.push_back(mib);
            }
        } else if (a == "--kv-transports") {
            o.kv.transports = split(next());
            for (const auto& t : o.kv.transports) {
                if (t != "shm" && t != "tcp") {
                    std::fprintf(stderr, "pdrouter_bench: --kv-transports: shm or tcp\n");
                    std::exit(2);
                }
            }
        } else if (a == "--kv-requests") {
            o.kv.requests = std::stoul(next());
        } else if (a == "--kv-concurrency") {
            o.kv.concurrency = std::stoul(next());
        } else if (a == "--kv-rounds") {
            o.kv.rounds = std::clamp(std::stoi(next()), 1, 20);
        } else if (a == "--prefill-delay-ms") {
            o.kv.prefill_delay_ms = std::stoi(next());
        } else if (a == "--decode-setup-delay-ms") {
            o.kv.decode_setup_ms = std::stoi(next());
        } else if (a == "--kv-token-delay-ms") {
            o.kv.token_delay_ms = std::stoi(next());
        } else if (a == "--scaling") {
            o.scale = true;
            o.scaling.threads.clear();
            for (const auto& v : split(next())) {
                const int t = std::stoi(v);
                if (t < 1 || t > 256) {
                    std::fprintf(stderr, "pdrouter_bench: --scaling: 1..256 threads each\n");
                    std::exit(2);
                }
                o.scaling.threads.push_back(t);
            }
        } else if (a == "--sim-kv-transfer") {
            o.sim_kv_transfer = next();
            if (o.sim_kv_transfer != "pdx" && o.sim_kv_transfer != "http") {
                std::fprintf(stderr, "pdrouter_bench: --sim-kv-transfer: pdx or http\n");
                std::exit(2);
            }
            o.scaling.sim_kv_transfer = o.sim_kv_transfer;
        } else if (a == "--router-threads") {
            o.router_threads = std::clamp(std::stoi(next()), 1, 256);
        } else if (a == "--scaling-engines") {
            o.scaling.engines = std::clamp(std::stoi(next()), 1, 64);
        } else if (a == "--scaling-load-threads") {
            o.scaling.load_threads = std::clamp(std::stoi(next()), 1, 64);
        } else if (a == "--quick") {
            o.requests = 200;
        } else {
            std::fprintf(stderr, "pdrouter_bench: unknown flag %s\n", a.c_str());
            std::exit(2);
        }
    }
    return o;
}

}  // namespace

int main(int argc, char** argv) try {
    Options o = parse(argc, argv);
    if (o.scale) {
        o.scaling.bin_dir = o.bin_dir;
        o.scaling.answers = o.answers;
        o.scaling.concurrency = o.concurrency;
        o.scaling.requests = o.requests;
        o.scaling.max_tokens = o.max_tokens;
        o.scaling.token_delay_ms = o.delays.empty() ? 0 : o.delays.front();
        std::printf("load average at start %s\n", load_average().c_str());
        const int code = pdr::bench::run_scaling(o.scaling);
        std::printf("(load average at end %s)\n", load_average().c_str());
        return code;
    }
    if (o.kv_modes) {
        o.kv.bin_dir = o.bin_dir;
        std::printf("pdrouter_bench --kv-modes: load average at start %s\n",
                    load_average().c_str());
        const int code = pdr::bench::run_kv_modes(o.kv);
        std::printf("(load average at end %s)\n", load_average().c_str());
        return code;
    }
    const std::string pdsim = o.bin_dir + "/sim/pdsim";
    const std::string pdrouter = o.bin_dir + "/router/pdrouter";
    std::string floor_relay =
        o.floor.empty() ? o.bin_dir + "/bench/router/pdr_floor_relay" : o.floor;
    if (floor_relay == "none" || ::access(floor_relay.c_str(), X_OK) != 0) {
        floor_relay.clear();
    }
    std::printf(
        "pdrouter_bench: concurrency %zu, %zu requests per row, max_tokens %d; load "
        "average at start %s\n\n",
        o.concurrency, o.requests, o.max_tokens, load_average().c_str());
    std::printf(
        "| answer  | path       | decode delay | req/s | p50 ms | p99 ms | TTFB p50 | TTFB p99 | "
        "pdrouter CPU us/req | failed |\n");
    std::printf("|---|---|---|---|---|---|---|---|---|---|\n");
    bool targets_met = true;
    std::ostringstream verdicts;
    double peak_rss = 0;
    std::size_t floor_failed = 0;  // requests the floor relay failed, all rows
    for (int delay : o.delays) {
        std::vector<std::string> kv_transfer;
        if (!o.sim_kv_transfer.empty()) {
            kv_transfer = {"--kv-transfer", o.sim_kv_transfer};
        }
        std::vector<std::string> p_args{pdsim, "--role",      "prefill", "--kv-lease-seconds",
                                        "5",   "--log-level", "warn"};
        p_args.insert(p_args.end(), kv_transfer.begin(), kv_transfer.end());
        Child prefill(p_args, "/tmp/pdr-bench-prefill.log");
        std::vector<std::string> d_args{
            pdsim,         "--role", "decode", "--token-delay-ms", std::to_string(delay),
            "--log-level", "warn"};
        d_args.insert(d_args.end(), kv_transfer.begin(), kv_transfer.end());
        Child decode(d_args, "/tmp/pdr-bench-decode.log");
        Child router({pdrouter, "--prefill", "127.0.0.1:" + std::to_string(prefill.port()),
                      "--decode", "127.0.0.1:" + std::to_string(decode.port()), "--log-level",
                      "warn", "--threads", std::to_string(o.router_threads)},
                     "/tmp/pdr-bench-router.log");
        std::unique_ptr<Child> nginx = start_nginx(o, decode.port());
        std::unique_ptr<Child> floor;
        if (!floor_relay.empty()) {
            floor = std::make_unique<Child>(
                std::vector<std::string>{floor_relay, "--prefill",
                                         "127.0.0.1:" + std::to_string(prefill.port()), "--decode",
                                         "127.0.0.1:" + std::to_string(decode.port())},
                "/tmp/pdr-bench-floor.log");
        }
        // The LMCache pair: P notifies the router's PULL socket; D's receiver on fixed ports.
        std::unique_ptr<Child> lm_prefill, lm_decode, lm_router;
        if (o.lmcache) {
            const std::string ready = "tcp://127.0.0.1:" + std::to_string(pdr::bench::free_port());
            const std::string init = std::to_string(pdr::bench::free_port());
            const std::string alloc = std::to_string(pdr::bench::free_port());
            lm_prefill = std::make_unique<Child>(
                std::vector<std::string>{pdsim, "--role", "prefill", "--kv-mode", "lmcache",
                                         "--kv-ready-connect", ready, "--log-level", "warn"},
                "/tmp/pdr-bench-lm-prefill.log");
            lm_decode = std::make_unique<Child>(
                std::vector<std::string>{pdsim, "--role", "decode", "--kv-mode", "lmcache",
                                         "--lmcache-init-ports", init, "--lmcache-alloc-ports",
                                         alloc, "--token-delay-ms", std::to_string(delay),
                                         "--log-level", "warn"},
                "/tmp/pdr-bench-lm-decode.log");
            lm_router = std::make_unique<Child>(
                std::vector<std::string>{
                    pdrouter, "--kv-mode", "lmcache", "--kv-ready-bind", ready, "--prefill",
                    "127.0.0.1:" + std::to_string(lm_prefill->port()), "--decode",
                    "127.0.0.1:" + std::to_string(lm_decode->port()), "--lmcache-init-ports", init,
                    "--lmcache-alloc-ports", alloc, "--log-level", "warn", "--threads",
                    std::to_string(o.router_threads)},
                "/tmp/pdr-bench-lm-router.log");
        }
        // Streams and long answers take longer per request: keep each row bounded in time.
        std::size_t n = delay > 0 ? std::max<std::size_t>(o.requests / 2, 100) : o.requests;

        LoadSpec pre{{"127.0.0.1", prefill.port()},
                     "/v1/completions",
                     prefill_body(),
                     false,
                     o.concurrency,
                     n,
                     n / 10};
        Row prefill_row{"prefill", delay, false, pdr::bench::run_load(pre)};
        print_row(prefill_row);
        for (bool stream : o.answers) {
            LoadSpec direct{{"127.0.0.1", decode.port()},
                            "/v1/completions",
                            body(o, stream),
                            stream,
                            o.concurrency,
                            n,
                            n / 10};
            Row d{"direct D", delay, stream, pdr::bench::run_load(direct)};
            print_row(d);
            std::vector<double> nginx_cpu;
            std::vector<double> floor_cpu;
            std::vector<double> router_cpu;
            std::vector<double> router_ttfb;
            std::vector<double> lm_cpu;
            std::vector<double> lm_ttfb;
            LoadSpec via_lm = direct;
            if (lm_router) {
                via_lm.target = {"127.0.0.1", lm_router->port()};
                pdr::bench::run_load(LoadSpec{via_lm.target, via_lm.path, via_lm.body, stream,
                                              o.concurrency, n / 10, 0});
            }
            std::size_t router_failed = 0;
            LoadSpec via = direct;
            via.target = {"127.0.0.1", router.port()};
            // Warm-up of the router's pools and caches, not timed.
            pdr::bench::run_load(
                LoadSpec{via.target, via.path, via.body, stream, o.concurrency, n / 10, 0});
            LoadSpec via_floor = direct;
            if (floor) {
                via_floor.target = {"127.0.0.1", floor->port()};
                pdr::bench::run_load(LoadSpec{via_floor.target, via_floor.path, via_floor.body,
                                              stream, o.concurrency, n / 10, 0});
            }
            for (int run = 0; run < o.repeat; ++run) {
                if (nginx) {
                    LoadSpec hop = direct;
                    hop.target = {"127.0.0.1", nginx->port()};
                    hop.warmup = 0;
                    hop.requests = n / 10;
                    pdr::bench::run_load(hop);
                    hop.requests = n;
                    double c0 = nginx->cpu_seconds();
                    Row g{"nginx hop", delay, stream, pdr::bench::run_load(hop)};
                    double c1 = nginx->cpu_seconds();
                    // Only the timed requests ran between c0 and c1: the hop's warm-up ran
                    // before c0 (the router's row counts its own warm-up, which runs inside).
                    std::size_t served = g.result.ok + g.result.failed;
                    g.cpu_us_per_req = (c1 - c0) * 1e6 / static_cast<double>(served);
                    nginx_cpu.push_back(g.cpu_us_per_req);
                    print_row(g);
                }
                if (floor) {
                    const Row f = measured_row(*floor, "floor", delay, stream, via_floor, n / 10);
                    floor_cpu.push_back(f.cpu_us_per_req);
                    floor_failed += f.result.failed;
                    print_row(f);
                }
                const Row r = measured_row(router, "pdrouter", delay, stream, via, n / 10);
                router_cpu.push_back(r.cpu_us_per_req);
                router_ttfb.push_back(percentile(r.result.ttfb_ms, 50));
                router_failed += r.result.failed;
                print_row(r);
                if (lm_router) {
                    const Row l =
                        measured_row(*lm_router, "pdr lmcache", delay, stream, via_lm, n / 10);
                    lm_cpu.push_back(l.cpu_us_per_req);
                    lm_ttfb.push_back(percentile(l.result.ttfb_ms, 50));
                    router_failed += l.result.failed;
                    print_row(l);
                }
            }
            if (lm_router) {
                char line[256];
                std::snprintf(line, sizeof line,
                              "- %s, decode delay %d ms: lmcache mode CPU %.0f us/request vs pull "
                              "%.0f (%.2f x); TTFB p50 %.2f ms vs pull %.2f ms (%+.2f ms)\n",
                              stream ? "stream" : "json", delay, median(lm_cpu), median(router_cpu),
                              median(lm_cpu) / median(router_cpu), median(lm_ttfb),
                              median(router_ttfb), median(lm_ttfb) - median(router_ttfb));
                verdicts << line;
            }
            const double cpu = median(router_cpu);
            bool cpu_ok = cpu <= 100;
            targets_met = targets_met && cpu_ok && router_failed == 0 && d.result.failed == 0;
            verdicts << "- " << (stream ? "stream" : "json") << ", decode delay " << delay
                     << " ms: pdrouter CPU " << static_cast<int>(cpu) << " us/request"
                     << (o.repeat > 1 ? " (median of " + join_us(router_cpu) + ")" : "")
                     << " (target <= 100): " << (cpu_ok ? "met" : "NOT met");
            if (!nginx_cpu.empty()) {
                const double ref = median(nginx_cpu);
                char line[200];
                std::snprintf(
                    line, sizeof line,
                    "; one nginx hop under the same load: %.0f us/request%s (pdrouter = "
                    "%.2f x nginx)",
                    ref, o.repeat > 1 ? (" (median of " + join_us(nginx_cpu) + ")").c_str() : "",
                    cpu / ref);
                verdicts << line;
            }
            verdicts << "\n";
            if (!floor_cpu.empty()) {
                const double f = median(floor_cpu);
                const double ref = median(nginx_cpu);
                char line[300];
                std::snprintf(
                    line, sizeof line, "- %s, decode delay %d ms: floor relay %.0f us/request%s",
                    stream ? "stream" : "json", delay, f,
                    o.repeat > 1 ? (" (median of " + join_us(floor_cpu) + ")").c_str() : "");
                verdicts << line;
                if (ref > 0) {
                    std::snprintf(line, sizeof line, " = %.2f x nginx", f / ref);
                    verdicts << line;
                }
                std::snprintf(line, sizeof line, "; pdrouter = %.2f x the floor\n", cpu / f);
                verdicts << line;
            }
            if (stream) {
                double budget = percentile(d.result.ttfb_ms, 50) +
                                percentile(prefill_row.result.latency_ms, 50);
                const double ttfb = median(router_ttfb);
                double extra = ttfb - budget;
                bool ttfb_ok = extra <= 1.0;
                targets_met = targets_met && ttfb_ok;
                char line[256];
                std::snprintf(
                    line, sizeof line,
                    "- stream, decode delay %d ms: TTFB p50 through pdrouter %.2f ms vs direct "
                    "decode TTFB + prefill leg %.2f ms: %+.2f ms (target <= +1 ms): %s\n",
                    delay, ttfb, budget, extra, ttfb_ok ? "met" : "NOT met");
                verdicts << line;
            }
        }
        peak_rss = std::max(peak_rss, router.peak_rss_mib());
    }
    bool rss_ok = peak_rss <= 30;
    targets_met = targets_met && rss_ok;
    std::printf("\n%s- pdrouter peak RSS %.1f MiB (target <= 30): %s\n", verdicts.str().c_str(),
                peak_rss, rss_ok ? "met" : "NOT met");
    if (!floor_relay.empty()) {
        if (floor_failed == 0) {
            std::printf("- floor relay: every request succeeded\n");
        } else {
            std::printf("- floor relay: %zu requests failed (its rows do not measure the floor)\n",
                        floor_failed);
        }
    }
    std::printf("\nall targets %s (load average at end %s)\n", targets_met ? "met" : "NOT met",
                load_average().c_str());
    return 0;
} catch (const std::exception& e) {
    std::fprintf(stderr, "pdrouter_bench: %s\n", e.what());
    return 1;
}
