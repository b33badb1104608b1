// The option table, --help and --version.
#include <array>

#include "config/options.hpp"

#ifndef PDR_VERSION
#define PDR_VERSION "0.0.0"
#endif

namespace pdr::config::detail {

namespace {

constexpr std::uint64_t kMaxMillis = 2147483647;  // ~24.8 days

const std::array kOptions = {
    // clang-format off
    Option{.name = "host", .kind = Kind::NonEmptyText, .meta = "ADDR",
           .help = "address to listen on (default 0.0.0.0)", .text = &Config::host,
           .group = "Listener"},
    Option{.name = "port", .kind = Kind::Number, .meta = "PORT",
           .help = "port to listen on; 0 picks a free port (default 8000)", .port = &Config::port,
           .min = 0, .max = 65535},
    Option{.name = "port-file", .kind = Kind::Text, .meta = "PATH",
           .help = "write the bound port to PATH once listening (default: none)",
           .text = &Config::port_file},
    Option{.name = "threads", .kind = Kind::Number, .meta = "N",
           .help = "worker threads for the data path, each with its own listener (SO_REUSEPORT) "
                   "and upstream connections; 0: one per CPU core the process may use (default 0)",
           .size = &Config::threads, .min = 0, .max = 256},
    Option{.name = "prefill", .kind = Kind::Instances, .meta = "HOST:PORT [HOST:PORT ...]",
           .help = "prefill instances (space- or comma-separated; repeatable)",
           .role = Role::Prefill, .group = "Instances"},
    Option{.name = "decode", .kind = Kind::Instances, .meta = "HOST:PORT [HOST:PORT ...]",
           .help = "decode instances (space- or comma-separated; repeatable)",
           .role = Role::Decode},
    Option{.name = "model", .kind = Kind::Text, .meta = "NAME",
           .help = "model the instances must serve (default: not checked)",
           .text = &Config::model},
    Option{.name = "admin-api-key", .kind = Kind::Text, .meta = "KEY",
           .help = "key for /instances/* (env ADMIN_API_KEY; default: admin off)",
           .text = &Config::admin_api_key, .group = "Keys"},
    Option{.name = "upstream-api-key", .kind = Kind::Text, .meta = "KEY",
           .help = "Bearer key for upstreams (env OPENAI_API_KEY; default: client's)",
           .text = &Config::upstream_api_key},
    Option{.name = "instance-allow", .kind = Kind::AllowList, .meta = "CIDR|ADDR|NAME [...]",
           .help = "admin-added instances that get the upstream key: CIDRs, addresses or host "
                   "names (default: none; static and DNS-discovered instances always get it)",
           .texts = &Config::instance_allow},
    Option{.name = "connect-timeout-ms", .kind = Kind::Number, .meta = "MS",
           .help = "upstream connect timeout (default 3000)",
           .millis = &Config::connect_timeout, .min = 1, .max = kMaxMillis,
           .group = "Timeouts (milliseconds, > 0)"},
    Option{.name = "prefill-timeout-ms", .kind = Kind::Number, .meta = "MS",
           .help = "whole prefill leg (default 300000)", .millis = &Config::prefill_timeout,
           .min = 1, .max = kMaxMillis},
    Option{.name = "decode-timeout-ms", .kind = Kind::Number, .meta = "MS",
           .help = "until the decode response head arrives (default 300000)",
           .millis = &Config::decode_timeout, .min = 1, .max = kMaxMillis},
    Option{.name = "decode-idle-timeout-ms", .kind = Kind::Number, .meta = "MS",
           .help = "between two decode stream chunks (default 120000)",
           .millis = &Config::decode_idle_timeout, .min = 1, .max = kMaxMillis},
    Option{.name = "request-read-timeout-ms", .kind = Kind::Number, .meta = "MS",
           .help = "reading one client request (default 30000)",
           .millis = &Config::request_read_timeout, .min = 1, .max = kMaxMillis},
    Option{.name = "client-idle-timeout-ms", .kind = Kind::Number, .meta = "MS",
           .help = "keep-alive idle time on client connections (default 75000)",
           .millis = &Config::client_idle_timeout, .min = 1, .max = kMaxMillis},
    Option{.name = "client-write-timeout-ms", .kind = Kind::Number, .meta = "MS",
           .help = "one write to a client that does not read: then the connection is closed "
                   "and its request ends (default 30000)",
           .millis = &Config::client_write_timeout, .min = 1, .max = kMaxMillis},
    Option{.name = "upstream-idle-timeout-ms", .kind = Kind::Number, .meta = "MS",
           .help = "reuse idle upstream connections only this long; keep it below the engines' "
                   "keep-alive timeout (default 4000)",
           .millis = &Config::upstream_idle_timeout, .min = 1, .max = kMaxMillis},
    Option{.name = "shutdown-grace-ms", .kind = Kind::Number, .meta = "MS",
           .help = "on SIGTERM/SIGINT, how long requests in flight may finish (default 10000)",
           .millis = &Config::shutdown_grace, .min = 0, .max = kMaxMillis},
    Option{.name = "kv-lease-timeout-ms", .kind = Kind::Number, .meta = "MS",
           .help = "prefill KV lease; refreshed every third of it (default 30000)",
           .millis = &Config::kv_lease_timeout, .min = 100, .max = kMaxMillis},
    Option{.name = "lease-route-recheck-ms", .kind = Kind::Number, .meta = "MS",
           .help = "a prefill without the lease-refresh route (404/405, as merged vLLM: D "
                   "renews leases itself) is not refreshed; it is asked again after this, or "
                   "when it comes back from down (default 600000)",
           .millis = &Config::lease_route_recheck, .min = 1, .max = kMaxMillis},
    Option{.name = "health-interval-ms", .kind = Kind::Number, .meta = "MS",
           .help = "probe period for healthy instances (default 5000)",
           .millis = &Config::health_interval, .min = 1, .max = kMaxMillis},
    Option{.name = "health-backoff-max-ms", .kind = Kind::Number, .meta = "MS",
           .help = "re-probe backoff cap for down instances: a restarted instance is back "
                   "within about this long (default 5000)",
           .millis = &Config::health_backoff_max, .min = 1, .max = kMaxMillis},
    Option{.name = "max-body-bytes", .kind = Kind::Number, .meta = "N",
           .help = "largest client request body (default 8388608)",
           .size = &Config::max_body_bytes, .min = 1, .max = std::uint64_t{1} << 30,
           .group = "Limits (> 0)"},
    Option{.name = "max-buffered-body-bytes", .kind = Kind::Number, .meta = "N",
           .help = "request-body bytes all client connections buffer together; a request "
                   "over it waits, then gets 503; 0: no bound (default 268435456)",
           .size = &Config::max_buffered_body_bytes, .min = 0, .max = std::uint64_t{1} << 40},
    Option{.name = "max-header-bytes", .kind = Kind::Number, .meta = "N",
           .help = "largest client request head (default 16384)",
           .size = &Config::max_header_bytes, .min = 1, .max = std::uint64_t{1} << 24},
    Option{.name = "max-concurrent-requests", .kind = Kind::Number, .meta = "N",
           .help = "requests handled at once; more get 429 (default 1024)",
           .size = &Config::max_concurrent_requests, .min = 1, .max = 1000000},
    Option{.name = "max-client-connections", .kind = Kind::Number, .meta = "N",
           .help = "open client connections; more get 503 and are closed (default 10000)",
           .size = &Config::max_client_connections, .min = 1, .max = 1000000},
    Option{.name = "reserved-probe-connections", .kind = Kind::Number, .meta = "N",
           .help = "connections past --max-client-connections kept for GET /health and "
                   "/metrics only; 0: none (default 16)",
           .size = &Config::reserved_probe_connections, .min = 0, .max = 100000},
    Option{.name = "max-connections-per-source", .kind = Kind::Number, .meta = "N",
           .help = "open connections from one client address; more get 503 and are closed "
                   "(default 0: no limit)",
           .size = &Config::max_connections_per_source, .min = 0, .max = 1000000},
    Option{.name = "max-kv-params-bytes", .kind = Kind::Number, .meta = "N",
           .help = "largest kv_transfer_params a prefill may answer; a bigger one is the "
                   "prefill's answer, refused with 502 (default 4194304)",
           .size = &Config::max_kv_params_bytes, .min = 64, .max = std::uint64_t{1} << 30},
    Option{.name = "max-upstream-body-bytes", .kind = Kind::Number, .meta = "N",
           .help = "largest whole (not streamed) upstream answer: prefill, non-stream decode, "
                   "probe (default 67108864)",
           .size = &Config::max_upstream_body_bytes, .min = 1024, .max = std::uint64_t{1} << 32},
    Option{.name = "kv-mode", .kind = Kind::KvMode, .meta = "pull|push|lmcache",
           .help = "how KV moves from prefill to decode: pull (vLLM NixlConnector), push (vLLM "
                   "NixlPushConnector: both legs at once, P writes into D's blocks) or lmcache "
                   "(LMCache PD backend, ZMQ KV-ready notifications) (default pull)",
           .group = "Behaviour"},
    Option{.name = "on-missing-kv-params", .kind = Kind::OnMissingKv, .meta = "error|recompute",
           .help = "when P answers without kv_transfer_params (default error)"},
    Option{.name = "rewrite-kv-host", .kind = Kind::RewriteKvHost, .meta = "auto|never|always",
           .help = "pull: replace P's kv_transfer_params.remote_host by the P address the router "
                   "used; auto: only a loopback or wildcard host (default auto)"},
    Option{.name = "pass-through-role", .kind = Kind::PassThroughRole, .meta = "decode|prefill",
           .help = "instances that serve /tokenize, /detokenize, /version, /v1/embeddings, "
                   "/pooling, /classify, /score, /rerank, passed through to one healthy "
                   "instance of this role (default decode)"},
    Option{.name = "expose-decode-kv-params", .kind = Kind::SetTrue, .meta = "",
           .help = "pass the kv_transfer_params of D's answer (its block ids and host) on to the "
                   "client (default: taken out)",
           .flag = &Config::expose_decode_kv_params},
    Option{.name = "prefill-retries", .kind = Kind::Number, .meta = "N",
           .help = "extra prefill attempts on another P, 0..10 (default 1)",
           .count = &Config::prefill_retries, .min = 0, .max = 10},
    Option{.name = "decode-retries", .kind = Kind::Number, .meta = "N",
           .help = "extra decode attempts after connect failure, 0..10 (default 1)",
           .count = &Config::decode_retries, .min = 0, .max = 10},
    Option{.name = "hide-instance-addresses", .kind = Kind::SetTrue, .meta = "",
           .help = "name instances prefill-N / decode-N in /status, /metrics and error bodies, "
                   "never by address (the admin API and logs keep addresses)",
           .flag = &Config::hide_instance_addresses},
    Option{.name = "no-lease-refresh", .kind = Kind::SetFalse, .meta = "",
           .help = "do not keep prefill KV leases alive (default: refresh)",
           .flag = &Config::lease_refresh},
    Option{.name = "lease-refresh", .kind = Kind::SetTrue, .meta = "",
           .help = "keep prefill KV leases alive while decode is pending (default)",
           .flag = &Config::lease_refresh},
    Option{.name = "kv-ready-bind", .kind = Kind::Text, .meta = "tcp://HOST:PORT",
           .help = "lmcache: ZMQ PULL socket for KV-ready notifications (LMCache's "
                   "pd_proxy_host/pd_proxy_port point here); required in lmcache mode",
           .text = &Config::kv_ready_bind, .group = "LMCache mode (--kv-mode lmcache)"},
    Option{.name = "lmcache-init-ports", .kind = Kind::LmcachePorts, .meta = "P,P.. [P,P.. ...]",
           .help = "per decode instance (in --decode order): its LMCache receiver init ports, one "
                   "per D TP rank, comma-separated", .init = true},
    Option{.name = "lmcache-alloc-ports", .kind = Kind::LmcachePorts, .meta = "P,P.. [P,P.. ...]",
           .help = "per decode instance: its receiver alloc ports, one per D TP rank"},
    Option{.name = "lmcache-receiver-hosts", .kind = Kind::LmcacheHosts, .meta = "HOST [HOST ...]",
           .help = "per decode instance: its KV receiver host (default: the instance's host)"},
    Option{.name = "kv-ready-expected", .kind = Kind::KvReadyCounts, .meta = "N [N ...]",
           .help = "per prefill instance: notifications per request, i.e. P's TP size; 0 = the "
                   "chosen D's TP size (default 0)"},
    Option{.name = "kv-ready-timeout-ms", .kind = Kind::Number, .meta = "MS",
           .help = "wait for all KV-ready notifications of a request (default 10000)",
           .millis = &Config::kv_ready_timeout, .min = 1, .max = kMaxMillis},
    Option{.name = "on-kv-ready-timeout", .kind = Kind::OnKvReadyTimeout, .meta = "error|proceed",
           .help = "when the wait times out: answer 504, or send the decode leg anyway (D "
                   "recomputes what it lacks) (default error)"},
    Option{.name = "kv-ready-ttl-ms", .kind = Kind::Number, .meta = "MS",
           .help = "unclaimed notifications (orphans, late duplicates) are dropped after this "
                   "(default 60000)",
           .millis = &Config::kv_ready_ttl, .min = 1, .max = kMaxMillis},
    Option{.name = "kv-ready-max-pending", .kind = Kind::Number, .meta = "N",
           .help = "most notification-table entries; past it the oldest unclaimed go first "
                   "(default 65536)",
           .size = &Config::kv_ready_max_pending, .min = 1, .max = 10000000},
    Option{.name = "kv-ready-allow", .kind = Kind::AllowList, .meta = "CIDR|ADDR [...]",
           .help = "lmcache: the sender addresses the PULL socket accepts connections from "
                   "(prefill hosts, peer replicas); others are refused at the handshake "
                   "(default: any)",
           .texts = &Config::kv_ready_allow},
    Option{.name = "kv-ready-curve-secret-key-file", .kind = Kind::Text, .meta = "PATH",
           .help = "lmcache: ZMQ CURVE on the PULL socket with this router's secret key (Z85, "
                   "40 characters); senders must use its public key (default: no CURVE)",
           .text = &Config::kv_ready_curve_secret_key_file},
    Option{.name = "kv-ready-curve-clients-file", .kind = Kind::Text, .meta = "PATH",
           .help = "lmcache, with CURVE: the senders' public keys (Z85, one per line, # "
                   "comments); others are refused (default: any key)",
           .text = &Config::kv_ready_curve_clients_file},
    Option{.name = "prefill-engine-ids", .kind = Kind::EngineIds, .meta = "ID [ID ...]",
           .help = "push: per prefill instance (in --prefill order) its engine_id (P's "
                   "--kv-transfer-config engine_id); required in push mode",
           .texts = &Config::prefill_engine_ids, .group = "Push mode (--kv-mode push)"},
    Option{.name = "prefill-engine-id", .kind = Kind::EngineIds, .meta = "ID [ID ...]",
           .help = "same as --prefill-engine-ids (the vLLM push demo's spelling)",
           .texts = &Config::prefill_engine_ids},
    Option{.name = "prefill-kv-hosts", .kind = Kind::KvHosts, .meta = "HOST [HOST ...]",
           .help = "push: per prefill instance its KV side-channel host "
                   "(VLLM_NIXL_SIDE_CHANNEL_HOST; default: the instance's host)",
           .texts = &Config::prefill_kv_hosts},
    Option{.name = "prefill-kv-host", .kind = Kind::KvHosts, .meta = "HOST [HOST ...]",
           .help = "same as --prefill-kv-hosts", .texts = &Config::prefill_kv_hosts},
    Option{.name = "prefill-side-channel-ports", .kind = Kind::SideChannelPorts,
           .meta = "PORT [PORT ...]",
           .help = "push: per prefill instance (or one for all) its KV side-channel port "
                   "(default 5600)"},
    Option{.name = "prefill-side-channel-port", .kind = Kind::SideChannelPorts,
           .meta = "PORT [PORT ...]", .help = "same as --prefill-side-channel-ports"},
    Option{.name = "prefill-tp-size", .kind = Kind::Number, .meta = "N",
           .help = "push: the prefill instances' tensor-parallel size (default 1)",
           .count = &Config::prefill_tp_size, .min = 1, .max = 1024},
    Option{.name = "prefill-pp-size", .kind = Kind::Number, .meta = "N",
           .help = "push: the prefill instances' pipeline-parallel size (default 1)",
           .count = &Config::prefill_pp_size, .min = 1, .max = 1024},
    Option{.name = "transfer-agent", .kind = Kind::SetTrue, .meta = "",
           .help = "pull and push: run the router's own transfer-core agent, so engines that "
                   "speak pdx get Abort and Heartbeat notes from it (default off)",
           .flag = &Config::transfer_agent},
    Option{.name = "transfer-agent-transports", .kind = Kind::Text, .meta = "LIST",
           .help = "UCX transports of the router's transfer agent, as UCX_TLS (e.g. tcp; "
                   "default: UCX's own choice)",
           .text = &Config::transfer_agent_transports},
    Option{.name = "prefill-policy", .kind = Kind::Policy,
           .meta = "round_robin|least_outstanding|power_of_two|prefix_affinity",
           .help = "how a prefill instance is chosen (default round_robin)",
           .role = Role::Prefill, .group = "Scale-out"},
    Option{.name = "decode-policy", .kind = Kind::Policy,
           .meta = "round_robin|least_outstanding|power_of_two",
           .help = "how a decode instance is chosen (default round_robin)", .role = Role::Decode},
    Option{.name = "prefix-affinity-chars", .kind = Kind::Number, .meta = "N",
           .help = "prefix_affinity: hash the prompt's first N characters (default 256)",
           .size = &Config::prefix_affinity_chars, .min = 1, .max = 1000000},
    Option{.name = "prefix-affinity-slack-pct", .kind = Kind::Number, .meta = "PCT",
           .help = "prefix_affinity: skip an instance loaded above (100+PCT)% of the average "
                   "(default 25)",
           .count = &Config::prefix_affinity_slack_pct, .min = 0, .max = 1000},
    Option{.name = "disagg-min-prompt-chars", .kind = Kind::Number, .meta = "N",
           .help = "text prompts shorter than N characters go straight to a decode instance "
                   "(default 0: all disaggregated)",
           .size = &Config::disagg_min_prompt_chars, .min = 0, .max = std::uint64_t{1} << 30},
    Option{.name = "disagg-min-prompt-tokens", .kind = Kind::Number, .meta = "N",
           .help = "token-id prompts shorter than N tokens go straight to a decode instance "
                   "(default 0: all disaggregated)",
           .size = &Config::disagg_min_prompt_tokens, .min = 0, .max = std::uint64_t{1} << 30},
    Option{.name = "fallback-direct", .kind = Kind::SetTrue, .meta = "",
           .help = "when no prefill instance is up, serve on a decode instance alone "
                   "(default off: 503)",
           .flag = &Config::fallback_direct},
    Option{.name = "prefill-dns", .kind = Kind::DnsTarget, .meta = "NAME:PORT",
           .help = "discover prefill instances: every A/AAAA record of NAME (default: none)",
           .address = &Config::prefill_dns, .role = Role::Prefill},
    Option{.name = "decode-dns", .kind = Kind::DnsTarget, .meta = "NAME:PORT",
           .help = "discover decode instances: every A/AAAA record of NAME (default: none)",
           .address = &Config::decode_dns, .role = Role::Decode},
    Option{.name = "dns-refresh-ms", .kind = Kind::Number, .meta = "MS",
           .help = "re-resolve the --prefill-dns/--decode-dns names this often (default 5000)",
           .millis = &Config::dns_refresh, .min = 100, .max = kMaxMillis},
    Option{.name = "dns-hosts-file", .kind = Kind::Text, .meta = "PATH",
           .help = "resolve the discovery names from PATH (lines 'NAME ADDR [ADDR ...]', re-read "
                   "at each refresh) instead of DNS; for tests (default: DNS)",
           .text = &Config::dns_hosts_file},
    Option{.name = "replica-id", .kind = Kind::Text, .meta = "ID",
           .help = "lmcache, several replicas: this replica's id, the host its peers reach its "
                   "PULL socket at (e.g. the pod IP; default: --kv-ready-bind's host)",
           .text = &Config::replica_id},
    Option{.name = "peer-routers", .kind = Kind::PeerRouters, .meta = "HOST:PORT [HOST:PORT ...]",
           .help = "lmcache: the other replicas' KV-ready PULL addresses; notifications for their "
                   "requests are forwarded there (default: none)"},
    Option{.name = "peer-routers-dns", .kind = Kind::DnsTarget, .meta = "NAME:PORT",
           .help = "lmcache: discover the replicas' PULL addresses: every A/AAAA record of NAME, "
                   "e.g. a headless Service (default: none)",
           .address = &Config::peer_routers_dns},
    Option{.name = "kv-ready-forward-hwm", .kind = Kind::Number, .meta = "N",
           .help = "lmcache: notifications queued for one peer replica, at most (default 1000)",
           .count = &Config::kv_ready_forward_hwm, .min = 1, .max = 1000000},
    Option{.name = "log-level", .kind = Kind::LogLevel, .meta = "debug|info|warn|error",
           .help = "log threshold (default info)", .group = "Logging"},
    Option{.name = "log-format", .kind = Kind::LogFormat, .meta = "text|json",
           .help = "log line format (default text)"},
    Option{.name = "demo", .kind = Kind::SetTrue, .meta = "",
           .help = "route to an embedded pdsim 1 prefill + 1 decode cluster, in the --kv-mode "
                   "(push needs UCX) (default off)",
           .flag = &Config::demo, .group = "Demo"},
    Option{.name = "demo-token-delay-ms", .kind = Kind::Number, .meta = "MS",
           .help = "per-token delay of the embedded decode pdsim (default 20)",
           .millis = &Config::demo_token_delay, .min = 0, .max = 60000},
    Option{.name = "prefiller-hosts", .kind = Kind::AliasHosts, .meta = "HOST [HOST ...]",
           .help = "prefill hosts, paired with ports (default localhost)",
           .role = Role::Prefill, .group = "vLLM toy-proxy aliases (hosts and ports zipped)"},
    Option{.name = "prefiller-host", .kind = Kind::AliasHosts, .meta = "HOST [HOST ...]",
           .help = "same as --prefiller-hosts", .role = Role::Prefill},
    Option{.name = "prefiller-ports", .kind = Kind::AliasPorts, .meta = "PORT [PORT ...]",
           .help = "prefill ports, paired with hosts (default 8100)", .role = Role::Prefill},
    Option{.name = "prefiller-port", .kind = Kind::AliasPorts, .meta = "PORT [PORT ...]",
           .help = "same as --prefiller-ports", .role = Role::Prefill},
    Option{.name = "decoder-hosts", .kind = Kind::AliasHosts, .meta = "HOST [HOST ...]",
           .help = "decode hosts, paired with ports (default localhost)",
           .role = Role::Decode},
    Option{.name = "decoder-host", .kind = Kind::AliasHosts, .meta = "HOST [HOST ...]",
           .help = "same as --decoder-hosts", .role = Role::Decode},
    Option{.name = "decoder-ports", .kind = Kind::AliasPorts, .meta = "PORT [PORT ...]",
           .help = "decode ports, paired with hosts (default 8200)", .role = Role::Decode},
    Option{.name = "decoder-port", .kind = Kind::AliasPorts, .meta = "PORT [PORT ...]",
           .help = "same as --decoder-ports", .role = Role::Decode},
    Option{.name = "config", .kind = Kind::ConfigFile, .meta = "FILE",
           .help = "JSON or YAML file, same keys in snake_case",
           .in_file = false, .group = "General"},
    Option{.name = "version", .kind = Kind::Version, .meta = "", .help = "print the version and exit",
           .in_file = false},
    Option{.name = "help", .kind = Kind::Help, .meta = "", .help = "print this help and exit",
           .in_file = false},
    Option{.name = "check-config", .kind = Kind::CheckConfig, .meta = "",
           .help = "check the configuration and exit, starting nothing (0: OK, 2: an error)",
           .in_file = false},
    // clang-format on
};

}  // namespace

std::span<const Option> options() {
    return kOptions;
}

const Option* find_option(std::string_view name) {
    for (const auto& o : kOptions) {
        if (o.name == name) {
            return &o;
        }
    }
    return nullptr;
}

}  // namespace pdr::config::detail

namespace pdr::config {

std::string_view version() {
    return PDR_VERSION;
}

std::string version_text() {
    return "pdrouter " + std::string(version()) + "\n";
}

std::string help_text() {
    std::string out =
        "Usage: pdrouter --prefill HOST:PORT [...] --decode HOST:PORT [...] [options]\n"
        "       pdrouter --config FILE [options]\n"
        "       pdrouter --demo [options]\n"
        "\n"
        "pdrouter routes OpenAI API requests across prefill/decode disaggregated vLLM instances.\n"
        "Every option is also a config-file key (snake_case: --connect-timeout-ms is\n"
        "connect_timeout_ms). Precedence: flag > config file > environment > default.\n"
        "--flag=value is accepted everywhere.\n";
    for (const auto& o : detail::options()) {
        if (!o.group.empty()) {
            out += "\n";
            out += o.group;
            out += ":\n";
        }
        std::string left = "  --" + std::string(o.name);
        if (!o.meta.empty()) {
            left += " " + std::string(o.meta);
        }
        if (left.size() < 34) {
            left.resize(34, ' ');
        } else {
            left += "\n" + std::string(34, ' ');
        }
        out += left;
        out += o.help;
        out += "\n";
    }
    out +=
        "\nEnvironment:\n"
        "  ADMIN_API_KEY                   same as --admin-api-key\n"
        "  OPENAI_API_KEY                  same as --upstream-api-key\n"
        "\nExit status: 0 on --help/--version/--check-config, 2 on a configuration error.\n";
    return out;
}

}  // namespace pdr::config
