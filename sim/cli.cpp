#include "sim/sim_server.hpp"

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
           "             [--model NAME] [--kv-lease-seconds S] [--token-delay-ms MS]\n"
           "             [--block-size-tokens N] [--keep-alive-ms MS] [--port-file PATH]\n"
           "             [--log-level debug|info|warn|error] [--help]\n"
           "\n"
           "An emulated vLLM engine for pdrouter tests and benchmarks (see docs/pdsim.md).\n"
           "  --role              prefill (one token + KV handle) or decode (default decode)\n"
           "  --port              HTTP port, 0 = any free port (default 0)\n"
           "  --host              bind address, also the remote_host of KV handles (127.0.0.1)\n"
           "  --engine-id         KV engine id (default pdsim-<role>-<port>)\n"
           "  --model             served model name (default pdsim-model)\n"
           "  --kv-lease-seconds  how long prefill holds KV blocks without read/refresh (30)\n"
           "  --token-delay-ms    delay per generated token (default 0)\n"
           "  --block-size-tokens tokens per KV block (default 16)\n"
           "  --keep-alive-ms     close idle kept-alive connections after this (default 5000,\n"
           "                      as vLLM's server)\n"
           "  --port-file         write the bound port to this file (atomically)\n"
           "  --log-level         debug, info, warn or error (default info)\n";
}

int parse_args(int argc, char** argv, SimConfig& cfg, std::string& port_file,
               std::string& log_level) {
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
        static constexpr std::string_view kFlags[] = {"--role",           "--port",
                                                      "--host",           "--engine-id",
                                                      "--model",          "--kv-lease-seconds",
                                                      "--token-delay-ms", "--block-size-tokens",
                                                      "--port-file",      "--log-level",
                                                      "--keep-alive-ms"};
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
        } else if (flag == "--token-delay-ms") {
            if (!parse_long(value, n) || n < 0 || n > 60'000) {
                return bad(flag, value, "expected milliseconds 0-60000");
            }
            cfg.token_delay = Duration{n};
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
        }
    }
    return 0;
}

void write_port_file(const std::string& path, unsigned short port) {
    const std::string tmp = path + ".tmp";
    {
        std::ofstream out(tmp, std::ios::trunc);
        out << port << '\n';
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

}  // namespace pdr::sim
