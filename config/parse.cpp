// The command line, over a config file, over the environment → Config (each source's settings
// applied by apply.cpp).
#include <cstdlib>

#include "config/apply.hpp"
#include "config/ascii.hpp"

namespace pdr::config {

namespace {

using detail::AliasOrigins;
using detail::apply;
using detail::check_host_and_port_file;
using detail::fail;
using detail::Failure;
using detail::Kind;
using detail::Option;
using detail::RawSetting;
using detail::Source;

bool starts_with_dash(const char* s) {
    return s[0] == '-' && s[1] != '\0';
}

// "tcp://HOST:PORT": HOST an address, a name, "*" or "[v6]"; PORT 0..65535 or "*".
bool valid_zmq_tcp_endpoint(std::string_view e) {
    if (!e.starts_with("tcp://")) {
        return false;
    }
    e.remove_prefix(6);
    const auto colon = e.rfind(':');
    if (colon == std::string_view::npos || colon == 0) {
        return false;
    }
    const std::string_view port = e.substr(colon + 1);
    if (port != "*") {
        if (port.empty() || port.size() > 5 ||
            port.find_first_not_of("0123456789") != std::string_view::npos ||
            std::stoul(std::string(port)) > 65535) {
            return false;
        }
    }
    const std::string_view host = e.substr(0, colon);
    return host.find_first_of("/ \t") == std::string_view::npos;
}

// The lmcache-mode settings: complete in that mode, absent in the others.
void check_lmcache(Config& cfg) {
    const bool lmcache = cfg.kv_mode == KvMode::Lmcache;
    if (!lmcache) {
        if (!cfg.kv_ready_bind.empty() || !cfg.lmcache_receivers.empty() ||
            !cfg.kv_ready_expected.empty() || !cfg.kv_ready_allow.empty() ||
            !cfg.kv_ready_curve_secret_key_file.empty() ||
            !cfg.kv_ready_curve_clients_file.empty()) {
            fail(
                "pdrouter: --kv-ready-bind, --kv-ready-allow, --kv-ready-curve-*, --lmcache-* and "
                "--kv-ready-expected are only used "
                "with --kv-mode lmcache (the mode is " +
                std::string(to_string(cfg.kv_mode)) + ")");
        }
        return;
    }
    if (cfg.kv_ready_bind.empty() && !cfg.demo) {
        fail(
            "pdrouter: --kv-mode lmcache needs --kv-ready-bind tcp://HOST:PORT (the ZMQ PULL "
            "socket LMCache's pd_proxy_host/pd_proxy_port point to)");
    }
    if (!cfg.kv_ready_bind.empty() && !valid_zmq_tcp_endpoint(cfg.kv_ready_bind)) {
        fail(
            "pdrouter: invalid value for --kv-ready-bind: expected tcp://HOST:PORT (HOST may be * "
            "for all interfaces)");
    }
    for (const std::string& entry : cfg.kv_ready_allow) {
        if (!allow_entry_is_numeric(entry)) {
            fail(
                "pdrouter: invalid value for --kv-ready-allow: expected CIDRs or IP addresses (a "
                "sender is known by its address only, host names cannot match)");
        }
    }
    if (!cfg.kv_ready_curve_clients_file.empty() && cfg.kv_ready_curve_secret_key_file.empty()) {
        fail(
            "pdrouter: --kv-ready-curve-clients-file needs --kv-ready-curve-secret-key-file (the "
            "senders' keys are checked only when CURVE is on)");
    }
    if (cfg.demo) {
        return;  // the demo makes its own receivers
    }
    if (!cfg.lmcache_receivers.empty() && cfg.lmcache_receivers.size() != cfg.decode.size()) {
        fail("pdrouter: " + std::to_string(cfg.lmcache_receivers.size()) +
             " LMCache receiver(s) (--lmcache-init-ports/--lmcache-alloc-ports/"
             "--lmcache-receiver-hosts) for " +
             std::to_string(cfg.decode.size()) +
             " decode instance(s): give one per decode instance, in --decode order");
    }
    for (std::size_t i = 0; i < cfg.lmcache_receivers.size(); ++i) {
        const auto& r = cfg.lmcache_receivers[i];
        if (r.init_ports.size() != r.alloc_ports.size()) {
            fail("pdrouter: decode instance " + cfg.decode[i].text() + " has " +
                 std::to_string(r.init_ports.size()) + " LMCache init port(s) but " +
                 std::to_string(r.alloc_ports.size()) +
                 " alloc port(s): give one of each per D TP rank");
        }
    }
    if (!cfg.kv_ready_expected.empty() && cfg.kv_ready_expected.size() != cfg.prefill.size()) {
        fail("pdrouter: " + std::to_string(cfg.kv_ready_expected.size()) +
             " --kv-ready-expected value(s) for " + std::to_string(cfg.prefill.size()) +
             " prefill instance(s): give one per prefill instance, in --prefill order");
    }
}

// The push-mode settings: engine ids for every static prefill in that mode, none of the
// per-prefill lists in the others.
// A replica id goes into KV-ready req_ids after an '@': letters, digits, '.', ':', '-', '_'.
bool valid_replica_id(std::string_view id) {
    if (id.empty() || id.size() > Config::kMaxReplicaIdBytes) {
        return false;
    }
    for (char c : id) {
        const bool alnum =
            (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
        if (!alnum && c != '.' && c != ':' && c != '-' && c != '_') {
            return false;
        }
    }
    return true;
}

std::string bare_host(std::string_view host) {
    if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
        host = host.substr(1, host.size() - 2);
    }
    return ascii::lower(host);
}

// Router replicas (lmcache): the replica id (given, or --kv-ready-bind's host) and the peers.
void check_replicas(Config& cfg) {
    const bool peers = !cfg.peer_routers.empty() || cfg.peer_routers_dns.port != 0;
    if (cfg.replica_id.empty() && !peers) {
        return;
    }
    if (cfg.kv_mode != KvMode::Lmcache || cfg.demo) {
        fail(
            "pdrouter: --replica-id, --peer-routers and --peer-routers-dns are only used with "
            "--kv-mode lmcache (and not with --demo)");
    }
    if (cfg.replica_id.empty()) {
        const std::string_view bind = std::string_view(cfg.kv_ready_bind).substr(6);
        const std::string host = bare_host(bind.substr(0, bind.rfind(':')));
        if (host == "*" || host == "0.0.0.0" || host == "::" || host.empty()) {
            fail(
                "pdrouter: --peer-routers/--peer-routers-dns need --replica-id ID: the host the "
                "other replicas reach this one's PULL socket at (e.g. the pod IP), since "
                "--kv-ready-bind " +
                cfg.kv_ready_bind + " does not name one");
        }
        cfg.replica_id = host;
    }
    cfg.replica_id = bare_host(cfg.replica_id);
    if (!valid_replica_id(cfg.replica_id)) {
        fail("pdrouter: invalid value for --replica-id: expected 1 to " +
             std::to_string(Config::kMaxReplicaIdBytes) + " letters, digits, '.', ':', '-' or '_'");
    }
    for (auto& p : cfg.peer_routers) {
        p.host = bare_host(p.host);
        if (!valid_replica_id(p.host)) {
            fail(
                "pdrouter: invalid peer router in --peer-routers: its host is its replica id, and "
                "must be letters, digits, '.', ':', '-' or '_'");
        }
    }
}

void check_push(Config& cfg) {
    const bool push = cfg.kv_mode == KvMode::Push;
    if (!push) {
        if (!cfg.prefill_engine_ids.empty() || !cfg.prefill_kv_hosts.empty() ||
            !cfg.prefill_side_channel_ports.empty()) {
            fail(
                "pdrouter: --prefill-engine-ids, --prefill-kv-hosts and "
                "--prefill-side-channel-ports are only used with --kv-mode push (the mode is " +
                std::string(to_string(cfg.kv_mode)) + ")");
        }
        if (cfg.transfer_agent && cfg.kv_mode == KvMode::Lmcache) {
            fail("pdrouter: --transfer-agent is used with --kv-mode pull or push, not lmcache");
        }
        return;
    }
    if (cfg.demo) {
        return;  // the demo's prefills are its own
    }
    const std::size_t n = cfg.prefill.size();
    if (cfg.prefill_engine_ids.size() != n) {
        fail(
            "pdrouter: --kv-mode push needs one --prefill-engine-ids value per prefill instance, "
            "in --prefill order (P's --kv-transfer-config engine_id): got " +
            std::to_string(cfg.prefill_engine_ids.size()) + " for " + std::to_string(n) +
            " prefill instance(s)");
    }
    for (std::size_t i = 0; i < n; ++i) {
        for (std::size_t j = 0; j < i; ++j) {
            if (cfg.prefill_engine_ids[i] == cfg.prefill_engine_ids[j]) {
                fail("pdrouter: prefill instances " + cfg.prefill[j].text() + " and " +
                     cfg.prefill[i].text() +
                     " have the same engine id (--prefill-engine-ids values " +
                     std::to_string(j + 1) + " and " + std::to_string(i + 1) +
                     "): each P needs its own");
            }
        }
    }
    if (!cfg.prefill_kv_hosts.empty() && cfg.prefill_kv_hosts.size() != n) {
        fail("pdrouter: " + std::to_string(cfg.prefill_kv_hosts.size()) +
             " --prefill-kv-hosts value(s) for " + std::to_string(n) +
             " prefill instance(s): give one per prefill instance, in --prefill order");
    }
    const std::size_t ports = cfg.prefill_side_channel_ports.size();
    if (ports > 1 && ports != n) {
        fail("pdrouter: " + std::to_string(ports) + " --prefill-side-channel-ports value(s) for " +
             std::to_string(n) +
             " prefill instance(s): give one for all, or one per prefill instance");
    }
}

}  // namespace

PushCoords push_coords_of(const Config& cfg, std::size_t i) {
    PushCoords c;
    if (i < cfg.prefill_engine_ids.size()) {
        c.engine_id = cfg.prefill_engine_ids[i];
    }
    if (i < cfg.prefill_kv_hosts.size()) {
        c.kv_host = cfg.prefill_kv_hosts[i];
    }
    const auto& ports = cfg.prefill_side_channel_ports;
    if (ports.size() == 1) {
        c.side_channel_port = ports.front();
    } else if (i < ports.size()) {
        c.side_channel_port = ports[i];
    }
    c.tp_size = cfg.prefill_tp_size;
    c.pp_size = cfg.prefill_pp_size;
    return c;
}

ParseOutcome parse_command_line(int argc, const char* const* argv,
                                const std::function<const char*(const char*)>& getenv_fn) {
    ParseOutcome outcome;
    bool check_only = false;  // --check-config
    try {
        std::vector<RawSetting> flags;
        // What the option before a stray word took, for the message about it.
        std::string stray_why = "not an option";
        for (int i = 1; i < argc; ++i) {
            std::string_view arg = argv[i];
            if (arg == "-h") {
                arg = "--help";
            }
            // A stray word is not printed (a key given after a space where '=' was meant, or
            // split from its flag, would reach the logs): its place in the command line is.
            if (arg == "--") {
                fail("pdrouter: unexpected argument '--' (see --help)");
            }
            if (!starts_with_dash(argv[i])) {
                fail("pdrouter: unexpected argument #" + std::to_string(i) + ": " + stray_why +
                     " (see --help)");
            }
            if (!arg.starts_with("--")) {
                fail(arg.size() <= 2
                         ? "pdrouter: unknown option '" + std::string(arg) + "' (see --help)"
                         : "pdrouter: unknown option at argument #" + std::to_string(i) +
                               ": options start with '--' (see --help)");
            }
            std::string_view body = arg.substr(2);
            auto eq = body.find('=');
            std::string name(body.substr(0, eq));
            const Option* o = detail::find_option(name);
            if (o == nullptr) {
                fail("pdrouter: unknown option '--" + name + "' (see --help)");
            }
            RawSetting s{o, name, {}};
            if (eq != std::string_view::npos) {
                if (o->kind == Kind::Help || o->kind == Kind::Version ||
                    o->kind == Kind::CheckConfig) {
                    fail("pdrouter: --" + name + " takes no value");
                }
                s.values.emplace_back(body.substr(eq + 1));
            } else if (is_switch(o->kind)) {
                s.values.emplace_back("true");
            } else if (detail::is_list(o->kind)) {
                while (i + 1 < argc && !starts_with_dash(argv[i + 1])) {
                    s.values.emplace_back(argv[++i]);
                }
            } else if (i + 1 < argc && !std::string_view(argv[i + 1]).starts_with("--")) {
                s.values.emplace_back(argv[++i]);
            }
            if (s.values.empty()) {
                fail("pdrouter: missing value for --" + name);
            }
            stray_why = eq != std::string_view::npos ? "--" + name + " took its value after '='"
                        : is_switch(o->kind)         ? "--" + name + " takes no value"
                                                     : "--" + name + " takes one value";
            if (o->kind == Kind::Help) {
                outcome.action = ParseOutcome::Action::Exit;
                outcome.output = help_text();
                return outcome;
            }
            if (o->kind == Kind::Version) {
                outcome.action = ParseOutcome::Action::Exit;
                outcome.output = version_text();
                return outcome;
            }
            if (o->kind == Kind::CheckConfig) {
                check_only = true;
                continue;
            }
            if (o->kind == Kind::ConfigFile) {
                if (s.values.front().empty()) {
                    fail("pdrouter: missing value for --config");
                }
                outcome.config.config_file = s.values.front();
                continue;
            }
            flags.push_back(std::move(s));
        }

        Config& cfg = outcome.config;
        // Weakest first: environment, then the config file, then flags.
        std::vector<RawSetting> env;
        const std::pair<const char*, const char*> kEnv[] = {{"ADMIN_API_KEY", "admin-api-key"},
                                                            {"OPENAI_API_KEY", "upstream-api-key"}};
        for (const auto& [var, option] : kEnv) {
            const char* v = getenv_fn ? getenv_fn(var) : nullptr;
            if (v != nullptr && *v != '\0') {
                env.push_back({detail::find_option(option), var, {v}});
            }
        }
        AliasOrigins origins;
        apply(Source{Source::Type::Env, {}}, env, cfg, origins);
        if (!cfg.config_file.empty()) {
            std::vector<RawSetting> file;
            std::string error;
            if (!detail::load_config_file(cfg.config_file, file, error)) {
                fail(error);
            }
            apply(Source{Source::Type::File, cfg.config_file}, file, cfg, origins);
        }
        apply(Source{Source::Type::Flags, {}}, flags, cfg, origins);
        check_host_and_port_file(cfg);

        if (!cfg.demo && cfg.prefill.empty() && cfg.prefill_dns.port == 0) {
            fail(
                "pdrouter: no prefill instance configured (use --prefill HOST:PORT, --prefill-dns "
                "NAME:PORT, or --demo)");
        }
        if (!cfg.demo && cfg.decode.empty() && cfg.decode_dns.port == 0) {
            fail(
                "pdrouter: no decode instance configured (use --decode HOST:PORT, --decode-dns "
                "NAME:PORT, or --demo)");
        }
        if (cfg.demo && (!cfg.prefill.empty() || !cfg.decode.empty())) {
            fail(
                "pdrouter: --demo runs its own prefill and decode instances; drop --prefill/"
                "--decode (and --prefiller-*/--decoder-*), or drop --demo");
        }
        check_lmcache(cfg);
        check_replicas(cfg);
        check_push(cfg);
    } catch (const Failure& f) {
        outcome.action = ParseOutcome::Action::Exit;
        outcome.exit_code = 2;
        outcome.output = f.message + "\n";
        outcome.config = Config{};
    } catch (const std::exception& e) {  // e.g. out of memory on a huge value
        outcome.action = ParseOutcome::Action::Exit;
        outcome.exit_code = 2;
        outcome.output = std::string("pdrouter: cannot read the configuration: ") + e.what() + "\n";
        outcome.config = Config{};
    }
    if (check_only && outcome.action == ParseOutcome::Action::Run) {
        outcome.action = ParseOutcome::Action::Exit;
        outcome.output = "configuration OK\n";
    }
    return outcome;
}

ParseOutcome parse_command_line(int argc, const char* const* argv) {
    return parse_command_line(argc, argv, [](const char* name) { return std::getenv(name); });
}

}  // namespace pdr::config