#pragma once
// Typed router configuration: command-line flags + config file (JSON or YAML) + environment,
// merged into one validated `Config`. Precedence: flag > config file > environment > default.
// Parsing never throws and never starts anything: errors come back as ParseOutcome{Exit, 2, msg}.
#include <chrono>
#include <cstddef>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "config/log_level.hpp"
#include "config/role.hpp"

namespace pdr {
using Duration = std::chrono::milliseconds;  // same alias as net/common/io.hpp
}

namespace pdr::config {

// One upstream instance. `host` is kept without brackets (an IPv6 literal is stored bare).
struct InstanceAddress {
    std::string host;
    unsigned short port = 0;

    // "host:port", or "[v6]:port" when host contains ':'.
    std::string text() const;
    friend bool operator==(const InstanceAddress&, const InstanceAddress&) = default;
};

// Accepts "host:port", "http://host:port", "http://host:port/", "[::1]:port", "dns-name:port".
// On failure returns false and sets `error` to a short reason (no trailing period).
bool parse_instance_address(std::string_view s, InstanceAddress& out, std::string& error);

enum class OnMissingKvParams { Error, Recompute };
// Pull mode: whether P's kv_transfer_params.remote_host is replaced by the P address the router
// used. Auto: only a loopback or wildcard host (P left VLLM_NIXL_SIDE_CHANNEL_HOST unset).
enum class RewriteKvHost { Auto, Never, Always };

// How the KV cache gets from P to D (docs/protocols.md), and so which flow serves a request.
// pull: vLLM NixlConnector (D reads P's blocks with the handle P answered). lmcache: LMCache's PD
// backend (P sends the KV to D's receiver and notifies the router over ZMQ; PROTOCOLS.md §5).
// push: vLLM NixlPushConnector (both legs at once; D registers its blocks with P, P writes into
// them; PROTOCOLS.md §4).
enum class KvMode { Pull, Lmcache, Push };

// What --on-kv-ready-timeout does when P's KV-ready notifications do not all arrive in time.
enum class OnKvReadyTimeout { Error, Proceed };

// A decode instance's LMCache KV receiver (lmcache mode): one init and one alloc port per D TP
// rank, on `host` (empty: the instance's own host).
struct LmcacheReceiver {
    std::string host;
    std::vector<unsigned short> init_ports, alloc_ports;
    bool empty() const noexcept { return init_ports.empty(); }
    friend bool operator==(const LmcacheReceiver&, const LmcacheReceiver&) = default;
};

// Parses one rank list "8300,8301" (1..65535 each, at most kMaxTpRanks). False + `error` on a
// bad list.
inline constexpr std::size_t kMaxTpRanks = 64;
bool parse_port_list(std::string_view s, std::vector<unsigned short>& out, std::string& error);

// A prefill instance's KV coordinates in push mode (PROTOCOLS.md §4): what D needs to register
// its blocks with P's agent before P has answered.
inline constexpr unsigned short kDefaultSideChannelPort = 5600;
struct PushCoords {
    std::string engine_id;  // P's --kv-transfer-config engine_id
    std::string kv_host;    // P's KV side-channel host ("" = the instance's host)
    unsigned short side_channel_port = kDefaultSideChannelPort;
    int tp_size = 1;
    int pp_size = 1;
    bool empty() const noexcept { return engine_id.empty(); }
    friend bool operator==(const PushCoords&, const PushCoords&) = default;
};

// An engine id as the push mode takes it: 1..256 printable ASCII characters, no spaces. Empty
// string when valid, else why not.
std::string check_engine_id(std::string_view id);

// --instance-allow entries: "CIDR" (10.0.0.0/8, fd00::/8), an address, or a host name (matched
// as written, case-insensitively; no DNS). check_allow_entry: empty when valid, else why not.
std::string check_allow_entry(std::string_view entry);
// True when `entry` is a CIDR or a numeric address (what a peer address can match: no names).
bool allow_entry_is_numeric(std::string_view entry);
// True when `host` (an instance's host as given, brackets removed) matches one of `allow`.
bool allow_matches(const std::vector<std::string>& allow, std::string_view host);

// How a role's instance is chosen for each request (router/instances/policy.hpp).
enum class Policy { RoundRobin, LeastOutstanding, PowerOfTwo, PrefixAffinity };

struct Config {
    std::string host = "0.0.0.0";
    unsigned short port = 8000;
    std::string port_file;  // write the bound port here (useful with --port 0)
    std::vector<InstanceAddress> prefill, decode;
    std::string model;               // empty: no model probe
    std::string admin_api_key;       // --admin-api-key or env ADMIN_API_KEY; empty: admin disabled
    std::string upstream_api_key;    // --upstream-api-key or env OPENAI_API_KEY; empty: forward
                                     // the client's Authorization header
    Duration connect_timeout{3000};  // upstream connect
    Duration prefill_timeout{300000};      // whole prefill leg
    Duration decode_timeout{300000};       // until the decode leg's response head arrives
    Duration decode_idle_timeout{120000};  // between two decode stream chunks
    Duration request_read_timeout{30000};  // reading a client request
    Duration client_idle_timeout{75000};   // keep-alive idle on client connections
    Duration client_write_timeout{30000};  // one write to a client that stopped reading
    // Idle pooled upstream connections older than this are not reused (closed). Below the
    // engines' own keep-alive close (uvicorn, vLLM's server: 5 s), so a request never goes out on
    // a connection the engine is closing at that moment (a POST is never sent twice).
    Duration upstream_idle_timeout{4000};
    Duration shutdown_grace{10000};    // SIGTERM/SIGINT: in-flight requests get this long
    Duration kv_lease_timeout{30000};  // P's KV lease; refreshes every kv_lease_timeout/3
    bool lease_refresh = true;         // --no-lease-refresh turns the LeaseKeeper off
    // A prefill that answered 404/405 on the lease-refresh route is asked again after this
    // (or when it comes back from down, or is added again).
    Duration lease_route_recheck{600000};
    Duration health_interval{5000};     // probe period for instances that are up
    Duration health_backoff_max{5000};  // re-probe backoff cap for instances that are down
    std::size_t max_body_bytes = 8u << 20;
    // Request-body bytes all client connections buffer together (bodies still arriving count
    // with their whole Content-Length); over it a request waits, then gets 503. 0: no bound.
    std::size_t max_buffered_body_bytes = 256u << 20;
    std::size_t max_header_bytes = 16u << 10;
    std::size_t max_concurrent_requests = 1024;
    // Data-path worker threads (--threads); 0: one per CPU core the process may use
    // (config::worker_threads resolves it).
    std::size_t threads = 0;
    std::size_t max_client_connections = 10000;
    // Connections over max_client_connections that may still be served, for GET/HEAD /health and
    // /metrics only (a probe must not fail because clients took every slot).
    std::size_t reserved_probe_connections = 16;
    std::size_t max_connections_per_source = 0;  // open connections per client address (0: off)
    // a prefill's kv_transfer_params, as text: fits a 1M-token prompt's block ids (62,500 ids
    // of 16 tokens, up to 8 bytes each as JSON, ~500 KB per KV group) for several KV groups
    std::size_t max_kv_params_bytes = 4u << 20;
    std::size_t max_upstream_body_bytes = 64u << 20;  // a whole (not streamed) upstream answer
    // Admin-added instances get the upstream API key only when they match one of these (CIDR
    // "10.0.0.0/8", an address, or a host name as written); static and discovered ones always do.
    std::vector<std::string> instance_allow;
    // Keep instance addresses out of what the client port serves (/status, /metrics, error
    // bodies): instances are named "prefill-N" / "decode-N" there instead.
    bool hide_instance_addresses = false;
    KvMode kv_mode = KvMode::Pull;
    // lmcache mode (PROTOCOLS.md §5). The receivers are per decode instance, in `decode` order
    // (empty, or one per instance); kv_ready_expected per prefill instance, in `prefill` order
    // (empty, or one per instance; 0 = the chosen D's TP size).
    std::string kv_ready_bind;         // tcp://HOST:PORT of the PULL socket (required)
    Duration kv_ready_timeout{10000};  // the wait for all notifications of one request
    OnKvReadyTimeout on_kv_ready_timeout = OnKvReadyTimeout::Error;
    Duration kv_ready_ttl{60000};              // unclaimed notifications are kept this long
    std::size_t kv_ready_max_pending = 65536;  // hard bound on the notification table
    // Who may connect to the PULL socket (router/kv/kv_ready_guard.hpp): sender addresses
    // (CIDR or address; empty: any), and CURVE: this router's secret key file (Z85; empty: no
    // CURVE) and the senders' public keys file (Z85, one per line; empty: any key).
    std::vector<std::string> kv_ready_allow;
    std::string kv_ready_curve_secret_key_file;
    std::string kv_ready_curve_clients_file;
    std::vector<LmcacheReceiver> lmcache_receivers;
    std::vector<int> kv_ready_expected;
    // push mode (PROTOCOLS.md §4), per prefill instance in `prefill` order: engine ids (one per
    // instance), KV side-channel hosts (empty, or one per instance) and ports (empty: 5600; one:
    // for every instance; or one per instance); one TP and PP size for all.
    std::vector<std::string> prefill_engine_ids;
    std::vector<std::string> prefill_kv_hosts;
    std::vector<unsigned short> prefill_side_channel_ports;
    int prefill_tp_size = 1;
    int prefill_pp_size = 1;
    // The router's own transfer-core agent (pull and push modes, engines that speak pdx): Abort
    // on failure paths, Heartbeat lease renewal, transfer observation (docs/protocols.md).
    bool transfer_agent = false;
    std::string transfer_agent_transports;  // UCX_TLS of the router's agent ("" = UCX's choice)
    OnMissingKvParams on_missing_kv_params = OnMissingKvParams::Error;
    RewriteKvHost rewrite_kv_host = RewriteKvHost::Auto;
    // The role whose instances serve the pass-through routes (/tokenize, /v1/embeddings, ...).
    ::pdr::Role pass_through_role = ::pdr::Role::Decode;
    // D's kv_transfer_params in its answer (block ids, host and port, for multi-turn reuse)
    // reach the client; by default they are taken out.
    bool expose_decode_kv_params = false;
    int prefill_retries = 1;  // extra attempts on another P after 5xx/connect/timeout
    int decode_retries = 1;   // extra attempts on another D after a connect failure
    log::Level log_level = log::Level::Info;
    log::Format log_format = log::Format::Text;
    bool demo = false;
    Duration demo_token_delay{20};
    std::string config_file;  // the --config file that was read, if any

    // Scale-out (issue 18): selection policies, selective disaggregation, DNS discovery.
    Policy prefill_policy = Policy::RoundRobin;
    Policy decode_policy = Policy::RoundRobin;
    std::size_t prefix_affinity_chars = 256;   // prefix_affinity: the key is the prompt's start
    int prefix_affinity_slack_pct = 25;        // bounded load: skip above (1 + pct/100) * average
    std::size_t disagg_min_prompt_chars = 0;   // shorter text prompts go straight to D (0: off)
    std::size_t disagg_min_prompt_tokens = 0;  // same for token-id prompts (0: off)
    bool fallback_direct = false;              // no prefill up: serve on D alone
    InstanceAddress prefill_dns, decode_dns;   // NAME:PORT resolved to all A/AAAA (port 0: off)
    Duration dns_refresh{5000};                // re-resolve period
    std::string dns_hosts_file;                // test resolver: "NAME ADDR..." lines (not DNS)
    // Router replicas in lmcache mode: the KV-ready req_ids this replica issues end in
    // "@<replica_id>", and a notification for another replica's id is forwarded to that replica's
    // PULL socket. A peer's replica id is the host it is reached at (its address in
    // peer_routers, or each address peer_routers_dns resolves to). Empty replica_id and no peers:
    // one replica, req_ids are the request ids unchanged.
    static constexpr std::size_t kMaxReplicaIdBytes = 64;
    std::string replica_id;
    std::vector<InstanceAddress> peer_routers;  // the other replicas' PULL addresses
    InstanceAddress peer_routers_dns;           // NAME:PORT of all replicas' PULL sockets
    int kv_ready_forward_hwm = 1000;            // ZMQ_SNDHWM of each peer's PUSH socket
};

struct ParseOutcome {
    enum class Action { Run, Exit } action = Action::Run;
    int exit_code = 0;   // Exit: 0 for --help/--version, 2 for errors
    std::string output;  // help/version text (stdout) or one error line (stderr); ends in '\n'
    Config config;       // valid when action == Run
};

// `argv` as given to main (argv[0] is the program name); `getenv_fn` looks up environment
// variables (tests inject one; it may return nullptr).
ParseOutcome parse_command_line(int argc, const char* const* argv,
                                const std::function<const char*(const char*)>& getenv_fn);
// Same, reading the process environment with std::getenv.
ParseOutcome parse_command_line(int argc, const char* const* argv);

std::string help_text();
std::string version_text();  // "pdrouter <version>\n"
std::string_view version();  // "<major>.<minor>.<patch>" from the CMake project version

// Prefill instance i's push-mode coordinates from the flags (engine id empty when none given).
PushCoords push_coords_of(const Config& cfg, std::size_t i);

std::string_view to_string(OnMissingKvParams v) noexcept;
std::string_view to_string(RewriteKvHost v) noexcept;
std::string_view to_string(KvMode v) noexcept;
std::string_view to_string(OnKvReadyTimeout v) noexcept;
std::string_view to_string(Policy v) noexcept;  // "round_robin", "least_outstanding", ...
bool parse_policy(std::string_view s, Policy& out) noexcept;

}  // namespace pdr::config
