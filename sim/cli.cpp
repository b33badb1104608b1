#include "sim/sim_server.hpp"

#include "pdx/agent.hpp"

#include <nlohmann/json.hpp>

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <stdexcept>
#include <string_view>

namespace pdr::sim {

namespace {

int bad(std::string_view flag, std::string_view value, std::string_view why) {
    std::cerr << "pdsim: invalid value '" << value << "' for " << flag << ": " << why
              << " (see --help)\n";
    return 2;
}

bool parse_long(std::string_view s, long long& out) {
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
    return ec == std::errc() && p == s.data() + s.size() && !s.empty();
}

// "8300,8301": ports 0-65535 (0: any free port), 1 to 64 of them.
bool parse_ports(std::string_view s, std::vector<unsigned short>& out) {
    out.clear();
    while (true) {
        const auto comma = s.find(',');
        long long n = 0;
        if (!parse_long(s.substr(0, comma), n) || n < 0 || n > 65535 || out.size() == 64) {
            return false;
        }
        out.push_back(static_cast<unsigned short>(n));
        if (comma == std::string_view::npos) {
            return true;
        }
        s.remove_prefix(comma + 1);
    }
}

// Checks the LMCache flags against each other once all are read; fills a decode's default
// receiver ports.
int finish_lmcache(SimConfig& cfg, bool tp_size_given) {
    LmcacheConfig& l = cfg.lmcache;
    if (cfg.kv_mode != KvMode::Lmcache || cfg.role != Role::Decode) {
        return 0;
    }
    if (l.init_ports.empty() != l.alloc_ports.empty() ||
        l.init_ports.size() != l.alloc_ports.size()) {
        std::cerr << "pdsim: --lmcache-init-ports and --lmcache-alloc-ports must list the same "
                     "number of ports, one per TP rank (see --help)\n";
        return 2;
    }
    if (l.init_ports.empty()) {
        l.init_ports.assign(static_cast<std::size_t>(l.tp_size), 0);
        l.alloc_ports.assign(static_cast<std::size_t>(l.tp_size), 0);
    } else if (tp_size_given && static_cast<int>(l.init_ports.size()) != l.tp_size) {
        std::cerr << "pdsim: --tp-size " << l.tp_size << " does not match the "
                  << l.init_ports.size() << " LMCache receiver port(s) given (see --help)\n";
        return 2;
    }
    l.tp_size = static_cast<int>(l.init_ports.size());
    return 0;
}

bool parse_double(const std::string& s, double& out) {
    if (s.empty()) {
        return false;
    }
    char* end = nullptr;
    errno = 0;
    out = std::strtod(s.c_str(), &end);
    return errno == 0 && end == s.c_str() + s.size() && std::isfinite(out);
}

}  // namespace

std::string usage_text() {
    return "usage: pdsim --role prefill|decode [--port N] [--host H] [--engine-id ID]\n"
           "             [--model NAME] [--kv-lease-seconds S] [--lease-route on|off]\n"
           "             [--kv-host H] [--answer-kv-params on|off]\n"
           "             [--token-delay-ms MS]\n"
           "             [--prefill-delay-ms MS] [--decode-setup-delay-ms MS]\n"
           "             [--block-size-tokens N] [--keep-alive-ms MS] [--port-file PATH]\n"
           "             [--log-level debug|info|warn|error] [--kv-mode pull|lmcache]\n"
           "             [--tp-size N] [--kv-ready-connect ENDPOINT] [--kv-bytes-per-token N]\n"
           "             [--lmcache-init-ports P,..] [--lmcache-alloc-ports P,..]\n"
           "             [--lmcache-ports-file PATH] [--lmcache-kv-ttl-seconds S]\n"
           "             [--lmcache-max-kv-bytes N] [--kv-transfer pdx|http]\n"
           "             [--kv-block-bytes N] [--kv-blocks N] [--kv-transports LIST]\n"
           "             [--kv-net-devices LIST] [--kv-wait-timeout-ms MS] [--help]\n"
           "\n"
           "An emulated vLLM engine for pdrouter tests and benchmarks (see docs/pdsim.md).\n"
           "  --role              prefill (one token + KV handle) or decode (default decode)\n"
           "  --port              HTTP port, 0 = any free port (default 0)\n"
           "  --host              bind address, also the remote_host of KV handles (127.0.0.1)\n"
           "  --engine-id         KV engine id (default pdsim-<role>-<port>)\n"
           "  --model             served model name (default pdsim-model)\n"
           "  --kv-lease-seconds  how long prefill holds KV blocks without read/refresh (30)\n"
           "  --lease-route       on: serve POST /internal/nixl/lease_refresh (vLLM with\n"
           "                      #35764); off: answer it 404, as merged vLLM (the calls are\n"
           "                      still counted in lease_refresh_calls) (default on)\n"
           "  --kv-host           the remote_host of KV handles (default --host)\n"
           "  --answer-kv-params  decode, on: the answer carries kv_transfer_params naming\n"
           "                      D's blocks and host, as vLLM's D does (default off)\n"
           "  --token-delay-ms    delay per generated token (default 0)\n"
           "  --prefill-delay-ms  prefill: the prompt's compute, waited before the KV is held,\n"
           "                      written or sent, in every KV mode (default 0)\n"
           "  --decode-setup-delay-ms decode, pull and push: D's setup before the KV moves\n"
           "                      (push: before it registers its blocks; pull: before the\n"
           "                      read) (default 0)\n"
           "  --block-size-tokens tokens per KV block (default 16)\n"
           "  --keep-alive-ms     close idle kept-alive connections after this (default 5000,\n"
           "                      as vLLM's server)\n"
           "  --port-file         write the bound port to this file (atomically)\n"
           "  --log-level         debug, info, warn or error (default info)\n"
           "  --kv-mode           pull (vLLM NixlConnector handles, default), push (P writes\n"
           "                      into the blocks D registers, vLLM NixlPushConnector) or\n"
           "                      lmcache (an LMCache P/D pair: P pushes KV to D's receivers\n"
           "                      and notifies the router over ZMQ)\n"
           "KV blocks (pull and push modes):\n"
           "  --kv-transfer       pdx (the transfer core, default when built with UCX) or http\n"
           "                      (the emulated /internal/pdsim/kv_read)\n"
           "  --kv-block-bytes    bytes per KV block (default 4096; 8-67108864)\n"
           "  --kv-blocks         blocks in the pool (default 4096); a request that does not\n"
           "                      fit is refused with 503\n"
           "  --kv-transports     UCX_TLS of the transfer agent, e.g. tcp or posix,self\n"
           "                      (default: UCX's choice)\n"
           "  --kv-net-devices    UCX_NET_DEVICES of the transfer agent, e.g. lo\n"
           "  --kv-wait-timeout-ms push, decode: bound on waiting for P's write (30000)\n"
           "LMCache mode:\n"
           "  --tp-size           TP ranks (default 1): prefill sends one notification per\n"
           "                      rank; decode opens one receiver per rank\n"
           "  --kv-ready-connect  prefill: ZMQ endpoint its PUSH socket connects to, e.g.\n"
           "                      tcp://127.0.0.1:7500 (the router's PULL socket)\n"
           "  --kv-bytes-per-token prefill: KV bytes sent per prompt token and D rank (64)\n"
           "  --lmcache-init-ports decode: receiver handshake ports, one per TP rank, e.g.\n"
           "                      8300,8301 (0 = any free port; default: --tp-size free ports)\n"
           "  --lmcache-alloc-ports decode: receiver KV ports, one per TP rank (as above)\n"
           "  --lmcache-ports-file decode: write the bound ports there as JSON\n"
           "                      {\"init_ports\":[..],\"alloc_ports\":[..]} (before --port-file)\n"
           "  --lmcache-kv-ttl-seconds decode: unclaimed KV is dropped after this (default 60)\n"
           "  --lmcache-max-kv-bytes decode: bound on unclaimed KV held, oldest dropped first\n"
           "                      (default 1073741824)\n";
}

int parse_args(int argc, char** argv, SimConfig& cfg, std::string& port_file,
               std::string& log_level) {
    bool tp_size_given = false;
    cfg.kv_transfer = pdx::ucx_available() ? KvTransfer::Pdx : KvTransfer::Http;
    for (int i = 1; i < argc; ++i) {
        std::string arg = argv[i];
        if (arg == "--help" || arg == "-h") {
            std::cout << usage_text();
            return 1;
        }
        std::string flag = arg;
        std::string value;
        bool has_value = false;
        if (auto eq = arg.find('='); arg.rfind("--", 0) == 0 && eq != std::string::npos) {
            flag = arg.substr(0, eq);
            value = arg.substr(eq + 1);
            has_value = true;
        }
        static constexpr std::string_view kFlags[] = {"--role",
                                                      "--port",
                                                      "--host",
                                                      "--engine-id",
                                                      "--model",
                                                      "--kv-lease-seconds",
                                                      "--lease-route",
                                                      "--kv-host",
                                                      "--answer-kv-params",
                                                      "--token-delay-ms",
                                                      "--prefill-delay-ms",
                                                      "--decode-setup-delay-ms",
                                                      "--block-size-tokens",
                                                      "--port-file",
                                                      "--log-level",
                                                      "--keep-alive-ms",
                                                      "--kv-mode",
                                                      "--tp-size",
                                                      "--kv-ready-connect",
                                                      "--kv-bytes-per-token",
                                                      "--lmcache-init-ports",
                                                      "--lmcache-alloc-ports",
                                                      "--lmcache-ports-file",
                                                      "--lmcache-kv-ttl-seconds",
                                                      "--lmcache-max-kv-bytes",
                                                      "--kv-transfer",
                                                      "--kv-block-bytes",
                                                      "--kv-blocks",
                                                      "--kv-transports",
                                                      "--kv-net-devices",
                                                      "--kv-wait-timeout-ms"};
        bool known = false;
        for (auto f : kFlags) {
            known = known || flag == f;
        }
        if (!known) {
            std::cerr << "pdsim: unknown argument '" << arg << "' (see --help)\n";
            return 2;
        }
        if (!has_value) {
            if (i + 1 >= argc) {
                std::cerr << "pdsim: missing value for " << flag << " (see --help)\n";
                return 2;
            }
            value = argv[++i];
        }
        long long n = 0;
        double d = 0;
        if (flag == "--role") {
            if (value == "prefill") {
                cfg.role = Role::Prefill;
            } else if (value == "decode") {
                cfg.role = Role::Decode;
            } else {
                return bad(flag, value, "expected prefill or decode");
            }
        } else if (flag == "--port") {
            if (!parse_long(value, n) || n < 0 || n > 65535) {
                return bad(flag, value, "expected a port number 0-65535");
            }
            cfg.port = static_cast<unsigned short>(n);
        } else if (flag == "--host") {
            if (value.empty()) {
                return bad(flag, value, "expected a host address");
            }
            cfg.host = value;
        } else if (flag == "--engine-id") {
            if (value.empty()) {
                return bad(flag, value, "expected a non-empty id");
            }
            cfg.engine_id = value;
        } else if (flag == "--model") {
            if (value.empty()) {
                return bad(flag, value, "expected a non-empty model name");
            }
            cfg.model = value;
        } else if (flag == "--kv-lease-seconds") {
            if (!parse_double(value, d) || d <= 0 || d > 86400) {
                return bad(flag, value, "expected seconds > 0 (at most 86400)");
            }
            cfg.kv_lease_seconds = d;
        } else if (flag == "--lease-route") {
            if (value != "on" && value != "off") {
                return bad(flag, value, "expected on or off");
            }
            cfg.lease_route = value == "on";
        } else if (flag == "--kv-host") {
            if (value.empty()) {
                return bad(flag, value, "expected a host name or address");
            }
            cfg.kv_host = value;
        } else if (flag == "--answer-kv-params") {
            if (value != "on" && value != "off") {
                return bad(flag, value, "expected on or off");
            }
            cfg.answer_kv_params = value == "on";
        } else if (flag == "--token-delay-ms") {
            if (!parse_long(value, n) || n < 0 || n > 60'000) {
                return bad(flag, value, "expected milliseconds 0-60000");
            }
            cfg.token_delay = Duration{n};
        } else if (flag == "--prefill-delay-ms") {
            if (!parse_long(value, n) || n < 0 || n > 60'000) {
                return bad(flag, value, "expected milliseconds 0-60000");
            }
            cfg.prefill_delay = Duration{n};
        } else if (flag == "--decode-setup-delay-ms") {
            if (!parse_long(value, n) || n < 0 || n > 60'000) {
                return bad(flag, value, "expected milliseconds 0-60000");
            }
            cfg.decode_setup_delay = Duration{n};
        } else if (flag == "--keep-alive-ms") {
            if (!parse_long(value, n) || n < 1 || n > 3'600'000) {
                return bad(flag, value, "expected milliseconds 1-3600000");
            }
            cfg.keep_alive = Duration{n};
        } else if (flag == "--block-size-tokens") {
            if (!parse_long(value, n) || n < 1 || n > 4096) {
                return bad(flag, value, "expected an integer 1-4096");
            }
            cfg.block_size_tokens = static_cast<int>(n);
        } else if (flag == "--port-file") {
            if (value.empty()) {
                return bad(flag, value, "expected a path");
            }
            port_file = value;
        } else if (flag == "--log-level") {
            if (value != "debug" && value != "info" && value != "warn" && value != "error") {
                return bad(flag, value, "expected debug, info, warn or error");
            }
            log_level = value;
        } else if (flag == "--kv-mode") {
            if (value == "pull") {
                cfg.kv_mode = KvMode::Pull;
            } else if (value == "lmcache") {
                cfg.kv_mode = KvMode::Lmcache;
            } else if (value == "push") {
                cfg.kv_mode = KvMode::Push;
            } else {
                return bad(flag, value, "expected pull, push or lmcache");
            }
        } else if (flag == "--kv-transfer") {
            if (value == "pdx") {
                if (!pdx::ucx_available()) {
                    return bad(flag, value, "this build has no UCX transfer backend (use http)");
                }
                cfg.kv_transfer = KvTransfer::Pdx;
            } else if (value == "http") {
                cfg.kv_transfer = KvTransfer::Http;
            } else {
                return bad(flag, value, "expected pdx or http");
            }
        } else if (flag == "--kv-block-bytes") {
            if (!parse_long(value, n) || n < 8 || n > (64LL << 20)) {
                return bad(flag, value, "expected bytes 8-67108864");
            }
            cfg.block_bytes = static_cast<std::size_t>(n);
        } else if (flag == "--kv-blocks") {
            if (!parse_long(value, n) || n < 1 || n > (1 << 20)) {
                return bad(flag, value, "expected an integer 1-1048576");
            }
            cfg.kv_blocks = static_cast<std::size_t>(n);
        } else if (flag == "--kv-transports" || flag == "--kv-net-devices") {
            if (value.empty()) {
                return bad(flag, value, "expected a comma-separated list");
            }
            (flag == "--kv-transports" ? cfg.kv_transports : cfg.kv_net_devices) = value;
        } else if (flag == "--kv-wait-timeout-ms") {
            if (!parse_long(value, n) || n < 1 || n > 3'600'000) {
                return bad(flag, value, "expected milliseconds 1-3600000");
            }
            cfg.kv_wait_timeout = Duration{n};
        } else if (flag == "--tp-size") {
            if (!parse_long(value, n) || n < 1 || n > 64) {
                return bad(flag, value, "expected an integer 1-64");
            }
            cfg.lmcache.tp_size = static_cast<int>(n);
            tp_size_given = true;
        } else if (flag == "--kv-ready-connect") {
            if (value.find("://") == std::string::npos) {
                return bad(flag, value, "expected a ZMQ endpoint such as tcp://127.0.0.1:7500");
            }
            cfg.lmcache.kv_ready_connect = value;
        } else if (flag == "--kv-bytes-per-token") {
            if (!parse_long(value, n) || n < 1 || n > (1 << 20)) {
                return bad(flag, value, "expected an integer 1-1048576");
            }
            cfg.lmcache.kv_bytes_per_token = static_cast<std::uint32_t>(n);
        } else if (flag == "--lmcache-init-ports") {
            if (!parse_ports(value, cfg.lmcache.init_ports)) {
                return bad(flag, value, "expected 1-64 comma-separated ports 0-65535");
            }
        } else if (flag == "--lmcache-alloc-ports") {
            if (!parse_ports(value, cfg.lmcache.alloc_ports)) {
                return bad(flag, value, "expected 1-64 comma-separated ports 0-65535");
            }
        } else if (flag == "--lmcache-ports-file") {
            if (value.empty()) {
                return bad(flag, value, "expected a path");
            }
            cfg.lmcache.ports_file = value;
        } else if (flag == "--lmcache-kv-ttl-seconds") {
            if (!parse_double(value, d) || d <= 0 || d > 86400) {
                return bad(flag, value, "expected seconds > 0 (at most 86400)");
            }
            cfg.lmcache.kv_ttl_seconds = d;
        } else if (flag == "--lmcache-max-kv-bytes") {
            if (!parse_long(value, n) || n < 1) {
                return bad(flag, value, "expected a byte count >= 1");
            }
            cfg.lmcache.max_kv_bytes = static_cast<std::uint64_t>(n);
        }
    }
    if (cfg.kv_transfer == KvTransfer::Pdx &&
        static_cast<double>(cfg.block_bytes) * static_cast<double>(cfg.kv_blocks) >
            static_cast<double>(64ULL << 30)) {
        std::cerr << "pdsim: --kv-blocks x --kv-block-bytes is over 64 GiB (see --help)\n";
        return 2;
    }
    if (cfg.kv_mode == KvMode::Push && cfg.kv_transfer != KvTransfer::Pdx) {
        std::cerr << "pdsim: --kv-mode push needs --kv-transfer pdx (see --help)\n";
        return 2;
    }
    return finish_lmcache(cfg, tp_size_given);
}

namespace {

// Writes `text` to `path` atomically (path.tmp, then rename).
void write_atomically(const std::string& path, const std::string& text) {
    const std::string tmp = path + ".tmp";
    {
        std::ofstream out(tmp, std::ios::trunc);
        out << text;
        out.flush();
        if (!out) {
            throw std::runtime_error("cannot write port file " + tmp);
        }
    }
    if (std::rename(tmp.c_str(), path.c_str()) != 0) {
        std::remove(tmp.c_str());
        throw std::runtime_error("cannot rename " + tmp + " to " + path);
    }
}

}  // namespace

void write_port_file(const std::string& path, unsigned short port) {
    write_atomically(path, std::to_string(port) + "\n");
}

void write_lmcache_ports_file(const std::string& path, const LmcacheConfig& cfg) {
    const nlohmann::json j{{"init_ports", cfg.init_ports}, {"alloc_ports", cfg.alloc_ports}};
    write_atomically(path, j.dump() + "\n");
}

const char* kv_mode_name(KvMode m) noexcept {
    return m == KvMode::Lmcache ? "lmcache" : m == KvMode::Push ? "push" : "pull";
}

}  // namespace pdr::sim
