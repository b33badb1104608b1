#pragma once
// DNS discovery (--prefill-dns / --decode-dns NAME:PORT): every A/AAAA record of NAME is an
// instance on PORT, as a Kubernetes headless Service gives one per ready pod. The names are
// resolved at start and every cfg.dns_refresh. An address that appears is probed like an admin
// add (GET /v1/models, the model checked when --model is set) and added with source
// "dns:NAME:PORT"; one whose probe fails is tried again at the next refresh. An instance of that
// source whose address is gone is drained: no new requests, those in flight finish. A name that
// does not exist (or has no records) drains all of its instances; a lookup that fails otherwise
// (a timeout, a server failure) changes nothing. Static and admin instances are never touched,
// and an address already listed by them is not added twice.
//
// --peer-routers-dns NAME:PORT (lmcache mode, several router replicas) is resolved on the same
// loop: each successful lookup hands the addresses (as HOST:PORT) to the peer handler, which
// replaces the forwarder's discovered peers; a failed lookup keeps them. Every lookup is counted
// in pdrouter_discovery_resolutions_total{role,result} and pdrouter_discovery_addresses{role}.
//
// The resolver is a seam: DNS through Asio (getaddrinfo), or a hosts file re-read at each refresh
// (--dns-hosts-file; tests rewrite it). Single-threaded, on the registry's executor.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "net/common/io.hpp"
#include "net/common/task_group.hpp"
#include "router/instances/registry.hpp"

namespace pdr::instances {

struct Resolved {
    bool ok = false;  // false: the lookup failed; `error` says why and nothing changes
    std::string error;
    std::vector<std::string> addresses;  // IPv4 dotted quads, bare IPv6; empty: no such name
};

class NameResolver {
public:
    virtual ~NameResolver() = default;
    virtual awaitable<Resolved> resolve(std::string name) = 0;
};

// Asio's resolver (the system's getaddrinfo, A and AAAA).
std::unique_ptr<NameResolver> make_dns_resolver(net::any_io_executor ex);
// Lines "NAME ADDR [ADDR ...]" ('#' starts a comment), read again at every lookup; a name not in
// the file has no records; a file that cannot be read fails the lookup.
std::unique_ptr<NameResolver> make_hosts_file_resolver(std::string path);

class Discovery {
public:
    // Discovers cfg.prefill_dns / cfg.decode_dns (those with a port) into `registry`.
    Discovery(net::any_io_executor ex, Registry& registry, const config::Config& cfg,
              std::unique_ptr<NameResolver> resolver);
    ~Discovery();
    Discovery(const Discovery&) = delete;
    Discovery& operator=(const Discovery&) = delete;

    // Receives what --peer-routers-dns resolves to, at each successful lookup.
    using PeerHandler = std::function<void(std::vector<config::InstanceAddress>)>;
    void on_peers(PeerHandler h) { on_peers_ = std::move(h); }

    bool enabled() const noexcept { return !targets_.empty(); }
    void start();  // first refresh now, then every cfg.dns_refresh
    void stop();
    // One refresh of every name (what the loop runs); for tests.
    awaitable<void> refresh();

private:
    struct Target {
        metrics::DiscoveryRole role;
        config::InstanceAddress name;  // host = the DNS name
        std::string source;            // "dns:NAME:PORT"
        std::string last_error;        // logged once per change
    };
    awaitable<void> refresh_target(Target& t);
    // The resolved addresses as HOST:PORT (bad ones logged and left out).
    static std::vector<config::InstanceAddress> addresses_of(const Target& t, const Resolved& r);
    awaitable<void> loop();

    Registry& registry_;
    const config::Config& cfg_;
    std::unique_ptr<NameResolver> resolver_;
    std::vector<Target> targets_;
    PeerHandler on_peers_;
    Timer timer_;
    bool stopped_ = false;
    TaskGroup tasks_;  // last: destroyed first
};

// The resolver --dns-hosts-file names, else DNS.
std::unique_ptr<NameResolver> make_resolver(net::any_io_executor ex, const config::Config& cfg);

}  // namespace pdr::instances
