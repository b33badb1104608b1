// Settings from one source (environment, config file or command line) checked and applied to
// a Config.
#include <arpa/inet.h>
#include <unistd.h>

#include <charconv>
#include <filesystem>

#include "config/apply.hpp"
#include "config/ascii.hpp"

namespace pdr::config::detail {

[[noreturn]] void fail(std::string message) {
    throw Failure{std::move(message)};
}

namespace {

// The refused value itself is never in the message: it may be a secret given in the wrong place
// (a key pasted into an address), and errors reach logs.
[[noreturn]] void bad_value(const Source& src, const RawSetting& s, std::string_view value,
                            std::string_view expected) {
    fail("pdrouter: " + std::string(value.empty() ? "empty" : "invalid") + " value for " +
         src.where(s) + ": " + std::string(expected));
}

bool parse_uint(std::string_view s, std::uint64_t& out) {
    if (s.empty()) {
        return false;
    }
    auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
    return ec == std::errc() && ptr == s.data() + s.size();
}

bool parse_bool(std::string_view s, bool& out) {
    std::string v = ascii::lower(s);
    if (v == "true" || v == "1" || v == "yes" || v == "on") {
        out = true;
    } else if (v == "false" || v == "0" || v == "no" || v == "off") {
        out = false;
    } else {
        return false;
    }
    return true;
}

// Splits each value on commas, and each comma item on spaces and tabs ("a:1 b:2", as a quoted
// "$LIST" gives it, is two items); an empty comma item is an error.
std::vector<std::string> split_items(const Source& src, const RawSetting& s) {
    std::vector<std::string> items;
    for (const auto& v : s.values) {
        std::string_view rest = v;
        while (true) {
            auto comma = rest.find(',');
            std::string_view item = ascii::trim(rest.substr(0, comma));
            if (item.empty()) {
                bad_value(src, s, v, "empty list item");
            }
            while (!item.empty()) {
                const auto gap = item.find_first_of(" \t");
                items.emplace_back(item.substr(0, gap));
                item = gap == std::string_view::npos ? std::string_view()
                                                     : ascii::trim(item.substr(gap));
            }
            if (comma == std::string_view::npos) {
                break;
            }
            rest.remove_prefix(comma + 1);
        }
    }
    return items;
}

// A text value goes into headers, logs and file names: no control characters (a trailing
// newline from a file or a Kubernetes Secret would end an upstream request's header block).
void check_text(const Source& src, const RawSetting& s, std::string_view value) {
    for (char c : value) {
        const auto u = static_cast<unsigned char>(c);
        if (u < 0x20 || u == 0x7f) {
            fail("pdrouter: invalid value for " + src.where(s) + ": control character (code " +
                 std::to_string(u) + ") in the value; a trailing newline from a file or a Secret?");
        }
    }
}

void set_number(const Source& src, const RawSetting& s, Config& cfg) {
    const Option& o = *s.option;
    const std::string& v = s.values.front();
    std::uint64_t n = 0;
    if (!parse_uint(v, n) || n < o.min || n > o.max) {
        std::string unit = o.millis != nullptr          ? " (milliseconds)"
                           : o.name.ends_with("-bytes") ? " (bytes)"
                                                        : "";
        bad_value(
            src, s, v,
            "expected an integer " + std::to_string(o.min) + ".." + std::to_string(o.max) + unit);
    }
    if (o.port != nullptr) {
        cfg.*o.port = static_cast<unsigned short>(n);
    }
    if (o.millis != nullptr) {
        cfg.*o.millis = Duration(static_cast<Duration::rep>(n));
    }
    if (o.size != nullptr) {
        cfg.*o.size = static_cast<std::size_t>(n);
    }
    if (o.count != nullptr) {
        cfg.*o.count = static_cast<int>(n);
    }
}

// Per source and role: instances from --prefill/--decode and the toy-proxy aliases.
struct RoleLists {
    bool set = false;
    std::vector<InstanceAddress> list;
    const RawSetting* hosts = nullptr;
    const RawSetting* ports = nullptr;
    std::vector<std::string> host_items, port_items;
};

void add_instance(const Source& src, const RawSetting& s, const InstanceAddress& a,
                  RoleLists& lists) {
    for (const auto& existing : lists.list) {
        if (existing == a) {
            fail("pdrouter: duplicate " +
                 std::string(s.option->role == detail::Role::Prefill ? "prefill" : "decode") +
                 " instance '" + a.text() + "' in " + src.where(s));
        }
    }
    lists.list.push_back(a);
}

bool is_ipv6_literal(const std::string& host) {
    in6_addr a{};
    return ::inet_pton(AF_INET6, host.substr(0, host.find('%')).c_str(), &a) == 1;
}

// "[::1]" is "::1"; other hosts as they are.
std::string without_brackets(std::string host) {
    if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
        host = host.substr(1, host.size() - 2);
    }
    return host;
}

// HOST:PORT as parse_instance_address reads it (an IPv6 literal in brackets).
std::string host_port_text(const std::string& host, std::string_view port) {
    return (host.find(':') != std::string::npos ? "[" + host + "]:" : host + ":") +
           std::string(port);
}

void zip_aliases(const Source& src, detail::Role role, RoleLists& lists, AliasOrigins& origins) {
    const int r = static_cast<int>(role);
    if (lists.hosts != nullptr && lists.ports == nullptr && !origins.ports[r].empty()) {
        fail("pdrouter: " + src.where(*lists.hosts) + " is given without its ports, which " +
             origins.ports[r] + " gives: give hosts and ports in the same place");
    }
    if (lists.ports != nullptr && lists.hosts == nullptr && !origins.hosts[r].empty()) {
        fail("pdrouter: " + src.where(*lists.ports) + " is given without its hosts, which " +
             origins.hosts[r] + " gives: give hosts and ports in the same place");
    }
    if (lists.hosts != nullptr) {
        origins.hosts[r] = src.where(*lists.hosts);
    }
    if (lists.ports != nullptr) {
        origins.ports[r] = src.where(*lists.ports);
    }
    if (lists.hosts == nullptr && lists.ports == nullptr) {
        return;
    }
    lists.set = true;
    std::vector<std::string> hosts =
        lists.hosts ? lists.host_items : std::vector<std::string>{"localhost"};
    std::vector<std::string> ports =
        lists.ports ? lists.port_items
                    : std::vector<std::string>{role == detail::Role::Prefill ? "8100" : "8200"};
    const char* who = role == detail::Role::Prefill ? "prefiller" : "decoder";
    if (hosts.size() != ports.size()) {
        fail("pdrouter: " + std::to_string(hosts.size()) + " " + who + " host(s) but " +
             std::to_string(ports.size()) + " " + who + " port(s) (" +
             (lists.hosts ? src.where(*lists.hosts) : std::string("default")) + ", " +
             (lists.ports ? src.where(*lists.ports) : std::string("default")) +
             "): hosts and ports are paired one to one");
    }
    for (std::size_t i = 0; i < hosts.size(); ++i) {
        std::uint64_t port = 0;
        if (!parse_uint(ports[i], port) || port == 0 || port > 65535) {
            bad_value(src, *lists.ports, ports[i], "expected an integer 1..65535");
        }
        InstanceAddress a;
        const std::string host = without_brackets(hosts[i]);
        std::string error;
        const RawSetting& origin = lists.hosts ? *lists.hosts : *lists.ports;
        if (host.find("://") != std::string::npos || host.find('/') != std::string::npos ||
            host.find('[') != std::string::npos || host.find(']') != std::string::npos ||
            (host.find(':') != std::string::npos && !is_ipv6_literal(host))) {
            bad_value(src, origin, hosts[i],
                      std::string("expected a host name or address only (no scheme, path or "
                                  "port: the port goes in --") +
                          who + "-ports)");
        }
        const std::string text = host_port_text(host, ports[i]);
        if (!parse_instance_address(text, a, error)) {
            bad_value(src, origin, host, error);
        }
        add_instance(src, origin, a, lists);
    }
}

}  // namespace

void apply(const Source& src, const std::vector<RawSetting>& settings, Config& cfg,
           AliasOrigins& origins) {
    RoleLists roles[2];
    for (const auto& s : settings) {
        const Option& o = *s.option;
        const std::string value = s.values.empty() ? std::string() : s.values.front();
        switch (o.kind) {
            case Kind::Text:
                check_text(src, s, value);
                cfg.*o.text = value;
                break;
            case Kind::NonEmptyText:
                check_text(src, s, value);
                if (value.empty()) {
                    bad_value(src, s, value, "expected a non-empty string");
                }
                cfg.*o.text = value;
                break;
            case Kind::Number:
                set_number(src, s, cfg);
                break;
            case Kind::SetTrue:
            case Kind::SetFalse: {
                bool b = false;
                if (!parse_bool(value, b)) {
                    bad_value(src, s, value, "expected true or false (also yes/no, on/off, 1/0)");
                }
                cfg.*o.flag = o.kind == Kind::SetTrue ? b : !b;
                break;
            }
            case Kind::Instances: {
                RoleLists& lists = roles[static_cast<int>(o.role)];
                lists.set = true;
                for (const auto& item : split_items(src, s)) {
                    InstanceAddress a;
                    std::string error;
                    if (!parse_instance_address(item, a, error)) {
                        bad_value(src, s, item, error);
                    }
                    add_instance(src, s, a, lists);
                }
                break;
            }
            case Kind::AliasHosts:
            case Kind::AliasPorts: {
                RoleLists& lists = roles[static_cast<int>(o.role)];
                bool hosts = o.kind == Kind::AliasHosts;
                (hosts ? lists.hosts : lists.ports) = &s;
                auto& items = hosts ? lists.host_items : lists.port_items;
                for (auto& item : split_items(src, s)) {
                    items.push_back(std::move(item));
                }
                break;
            }
            case Kind::LogLevel: {
                std::string v = ascii::lower(value);
                if (v == "debug") {
                    cfg.log_level = log::Level::Debug;
                } else if (v == "info") {
                    cfg.log_level = log::Level::Info;
                } else if (v == "warn" || v == "warning") {
                    cfg.log_level = log::Level::Warn;
                } else if (v == "error") {
                    cfg.log_level = log::Level::Error;
                } else {
                    bad_value(src, s, value, "expected one of debug, info, warn, error");
                }
                break;
            }
            case Kind::LogFormat: {
                std::string v = ascii::lower(value);
                if (v != "text" && v != "json") {
                    bad_value(src, s, value, "expected one of text, json");
                }
                cfg.log_format = v == "json" ? log::Format::Json : log::Format::Text;
                break;
            }
            case Kind::OnMissingKv: {
                std::string v = ascii::lower(value);
                if (v != "error" && v != "recompute") {
                    bad_value(src, s, value, "expected one of error, recompute");
                }
                cfg.on_missing_kv_params =
                    v == "error" ? OnMissingKvParams::Error : OnMissingKvParams::Recompute;
                break;
            }
            case Kind::RewriteKvHost: {
                std::string v = ascii::lower(value);
                if (v == "auto") {
                    cfg.rewrite_kv_host = config::RewriteKvHost::Auto;
                } else if (v == "never") {
                    cfg.rewrite_kv_host = config::RewriteKvHost::Never;
                } else if (v == "always") {
                    cfg.rewrite_kv_host = config::RewriteKvHost::Always;
                } else {
                    bad_value(src, s, value, "expected one of auto, never, always");
                }
                break;
            }
            case Kind::PassThroughRole: {
                std::string v = ascii::lower(value);
                if (v != "decode" && v != "prefill") {
                    bad_value(src, s, value, "expected decode or prefill");
                }
                cfg.pass_through_role = v == "prefill" ? ::pdr::Role::Prefill : ::pdr::Role::Decode;
                break;
            }
            case Kind::KvMode: {
                std::string v = ascii::lower(value);
                if (v == "pull") {
                    cfg.kv_mode = config::KvMode::Pull;
                } else if (v == "push") {
                    cfg.kv_mode = config::KvMode::Push;
                } else if (v == "lmcache") {
                    cfg.kv_mode = config::KvMode::Lmcache;
                } else {
                    bad_value(src, s, value, "expected pull, push or lmcache");
                }
                break;
            }
            case Kind::OnKvReadyTimeout: {
                std::string v = ascii::lower(value);
                if (v != "error" && v != "proceed") {
                    bad_value(src, s, value, "expected one of error, proceed");
                }
                cfg.on_kv_ready_timeout =
                    v == "error" ? OnKvReadyTimeout::Error : OnKvReadyTimeout::Proceed;
                break;
            }
            case Kind::LmcachePorts: {
                // Instances are separated by spaces (or given as separate values), ranks by
                // commas: "8300,8301 8310,8311".
                std::vector<std::vector<unsigned short>> groups;
                for (const auto& v : s.values) {
                    std::string_view rest = ascii::trim(v);
                    if (rest.empty()) {
                        bad_value(src, s, v, "expected comma-separated ports per instance");
                    }
                    while (!rest.empty()) {
                        const auto gap = rest.find_first_of(" \t");
                        const std::string_view item = rest.substr(0, gap);
                        std::vector<unsigned short> ports;
                        std::string error;
                        if (!parse_port_list(item, ports, error)) {
                            bad_value(src, s, item, error);
                        }
                        groups.push_back(std::move(ports));
                        rest = gap == std::string_view::npos ? std::string_view()
                                                             : ascii::trim(rest.substr(gap));
                    }
                }
                if (cfg.lmcache_receivers.size() < groups.size()) {
                    cfg.lmcache_receivers.resize(groups.size());
                }
                for (auto& r : cfg.lmcache_receivers) {
                    (o.init ? r.init_ports : r.alloc_ports).clear();
                }
                for (std::size_t i = 0; i < groups.size(); ++i) {
                    (o.init ? cfg.lmcache_receivers[i].init_ports
                            : cfg.lmcache_receivers[i].alloc_ports) = std::move(groups[i]);
                }
                break;
            }
            case Kind::LmcacheHosts: {
                const std::vector<std::string> hosts = split_items(src, s);
                if (cfg.lmcache_receivers.size() < hosts.size()) {
                    cfg.lmcache_receivers.resize(hosts.size());
                }
                for (std::size_t i = 0; i < cfg.lmcache_receivers.size(); ++i) {
                    std::string host = i < hosts.size() ? without_brackets(hosts[i]) : "";
                    InstanceAddress a;
                    std::string error;
                    if (!host.empty() &&
                        (host.find_first_of("[]/") != std::string::npos ||
                         !parse_instance_address(host_port_text(host, "1"), a, error))) {
                        bad_value(src, s, hosts[i], "expected a host name or IP address");
                    }
                    cfg.lmcache_receivers[i].host = host;
                }
                break;
            }
            case Kind::KvReadyCounts: {
                cfg.kv_ready_expected.clear();
                for (const auto& item : split_items(src, s)) {
                    std::uint64_t n = 0;
                    if (!parse_uint(item, n) || n > kMaxTpRanks) {
                        bad_value(src, s, item,
                                  "expected an integer 0.." + std::to_string(kMaxTpRanks));
                    }
                    cfg.kv_ready_expected.push_back(static_cast<int>(n));
                }
                break;
            }
            case Kind::EngineIds: {
                std::vector<std::string>& ids = cfg.*o.texts;
                ids.clear();
                for (auto& item : split_items(src, s)) {
                    if (std::string why = check_engine_id(item); !why.empty()) {
                        bad_value(src, s, item, why);
                    }
                    ids.push_back(std::move(item));
                }
                break;
            }
            case Kind::KvHosts: {
                std::vector<std::string>& hosts = cfg.*o.texts;
                hosts.clear();
                for (const auto& item : split_items(src, s)) {
                    std::string host = without_brackets(item);
                    InstanceAddress a;
                    std::string error;
                    if (host.find_first_of("[]/") != std::string::npos ||
                        !parse_instance_address(host_port_text(host, "1"), a, error)) {
                        bad_value(src, s, item, "expected a host name or IP address");
                    }
                    hosts.push_back(std::move(host));
                }
                break;
            }
            case Kind::AllowList: {
                std::vector<std::string>& entries = cfg.*o.texts;
                entries.clear();
                for (auto& item : split_items(src, s)) {
                    if (std::string why = check_allow_entry(item); !why.empty()) {
                        bad_value(src, s, item, why);
                    }
                    entries.push_back(std::move(item));
                }
                break;
            }
            case Kind::SideChannelPorts: {
                cfg.prefill_side_channel_ports.clear();
                for (const auto& item : split_items(src, s)) {
                    std::uint64_t n = 0;
                    if (!parse_uint(item, n) || n < 1 || n > 65535) {
                        bad_value(src, s, item, "expected a port 1..65535");
                    }
                    cfg.prefill_side_channel_ports.push_back(static_cast<unsigned short>(n));
                }
                break;
            }
            case Kind::Policy: {
                Policy p{};
                const bool decode = o.role == detail::Role::Decode;
                if (!parse_policy(ascii::lower(value), p) ||
                    (decode && p == Policy::PrefixAffinity)) {
                    bad_value(src, s, value,
                              decode ? "expected one of round_robin, least_outstanding, "
                                       "power_of_two"
                                     : "expected one of round_robin, least_outstanding, "
                                       "power_of_two, prefix_affinity");
                }
                (decode ? cfg.decode_policy : cfg.prefill_policy) = p;
                break;
            }
            case Kind::DnsTarget: {
                InstanceAddress a;
                std::string error;
                if (!value.empty() && (value.find("://") != std::string::npos ||
                                       !parse_instance_address(value, a, error))) {
                    bad_value(src, s, value,
                              error.empty() ? std::string("expected NAME:PORT") : error);
                }
                cfg.*o.address = a;
                break;
            }
            case Kind::PeerRouters: {
                cfg.peer_routers.clear();
                for (const auto& item : split_items(src, s)) {
                    InstanceAddress a;
                    std::string error;
                    if (item.find("://") != std::string::npos ||
                        !parse_instance_address(item, a, error)) {
                        bad_value(src, s, item,
                                  error.empty() ? std::string("expected HOST:PORT") : error);
                    }
                    cfg.peer_routers.push_back(std::move(a));
                }
                break;
            }
            case Kind::ConfigFile:
            case Kind::Help:
            case Kind::Version:
            case Kind::CheckConfig:
                break;  // handled while scanning the command line
        }
    }
    for (int r = 0; r < 2; ++r) {
        zip_aliases(src, static_cast<detail::Role>(r), roles[r], origins);
        if (roles[r].set) {
            (r == 0 ? cfg.prefill : cfg.decode) = std::move(roles[r].list);
        }
    }
}

// --host: an IPv4 or IPv6 address (brackets allowed and dropped) or a host name; --port-file:
// a file that can be written once listening (checked now, before anything starts).
void check_host_and_port_file(Config& cfg) {
    const std::string host = without_brackets(cfg.host);
    InstanceAddress a;
    std::string error;
    if (host.find_first_of("[]/") != std::string::npos ||
        !parse_instance_address(host_port_text(host, "1"), a, error)) {
        fail(std::string(
                 "pdrouter: invalid value for --host: expected an IP address or a host name") +
             (error.empty() ? std::string() : " (" + error + ")"));
    }
    cfg.host = host;
    if (!cfg.port_file.empty()) {
        namespace fs = std::filesystem;
        const fs::path file(cfg.port_file);
        const fs::path dir = file.has_parent_path() ? file.parent_path() : fs::path(".");
        std::error_code ec;
        if (fs::is_directory(file, ec)) {
            fail("pdrouter: invalid value for --port-file: it names a directory");
        }
        if (!fs::is_directory(dir, ec) || ::access(dir.c_str(), W_OK) != 0) {
            fail(
                "pdrouter: invalid value for --port-file: its directory does not exist or is not "
                "writable");
        }
    }
}

}  // namespace pdr::config::detail
