#include "router/instances/discovery.hpp"

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>

#include "config/ascii.hpp"
#include "net/common/log.hpp"

namespace pdr::instances {

namespace {

constexpr std::string_view kLog = "discovery";

class DnsResolver final : public NameResolver {
public:
    explicit DnsResolver(net::any_io_executor ex) : resolver_(std::move(ex)) {}
    awaitable<Resolved> resolve(std::string name) override {
        Resolved out;
        auto [ec, results] = co_await resolver_.async_resolve(name, "");
        if (ec == net::error::host_not_found) {
            out.ok = true;  // no such name, or no records: no instances
            co_return out;
        }
        if (ec) {
            out.error = ec.message();
            co_return out;
        }
        out.ok = true;
        for (const auto& entry : results) {
            std::string a = entry.endpoint().address().to_string();
            if (std::find(out.addresses.begin(), out.addresses.end(), a) == out.addresses.end()) {
                out.addresses.push_back(std::move(a));
            }
        }
        co_return out;
    }

private:
    pdr::Resolver resolver_;
};

class HostsFileResolver final : public NameResolver {
public:
    explicit HostsFileResolver(std::string path) : path_(std::move(path)) {}
    awaitable<Resolved> resolve(std::string name) override {
        Resolved out;
        std::ifstream in(path_);
        if (!in) {
            out.error = "cannot read " + path_;
            co_return out;
        }
        out.ok = true;
        const std::string wanted = ascii::lower(name);
        std::string line;
        while (std::getline(in, line)) {
            std::istringstream words(line.substr(0, line.find('#')));
            std::string first, addr;
            if (!(words >> first) || ascii::lower(first) != wanted) {
                continue;
            }
            while (words >> addr) {
                out.addresses.push_back(addr);
            }
        }
        co_return out;
    }

private:
    std::string path_;
};

}  // namespace

std::unique_ptr<NameResolver> make_dns_resolver(net::any_io_executor ex) {
    return std::make_unique<DnsResolver>(std::move(ex));
}

std::unique_ptr<NameResolver> make_hosts_file_resolver(std::string path) {
    return std::make_unique<HostsFileResolver>(std::move(path));
}

std::unique_ptr<NameResolver> make_resolver(net::any_io_executor ex, const config::Config& cfg) {
    if (!cfg.dns_hosts_file.empty()) {
        return make_hosts_file_resolver(cfg.dns_hosts_file);
    }
    return make_dns_resolver(std::move(ex));
}

Discovery::Discovery(net::any_io_executor ex, Registry& registry, const config::Config& cfg,
                     std::unique_ptr<NameResolver> resolver)
    : registry_(registry), cfg_(cfg), resolver_(std::move(resolver)), timer_(ex), tasks_(ex) {
    using metrics::DiscoveryRole;
    for (auto [role, name] : {std::pair{DiscoveryRole::Prefill, cfg.prefill_dns},
                              std::pair{DiscoveryRole::Decode, cfg.decode_dns},
                              std::pair{DiscoveryRole::Router, cfg.peer_routers_dns}}) {
        if (name.port != 0) {
            targets_.push_back(Target{role, name, "dns:" + name.text(), {}});
        }
    }
}

Discovery::~Discovery() {
    stop();
}

void Discovery::start() {
    if (enabled() && !stopped_) {
        tasks_.spawn(loop());
    }
}

void Discovery::stop() {
    stopped_ = true;
    timer_.cancel();
    tasks_.stop();
}

awaitable<void> Discovery::loop() {
    const TaskGroup::Alive alive = tasks_.alive();
    while (!stopped_) {
        co_await refresh();
        if (!alive || stopped_) {
            co_return;
        }
        timer_.expires_after(cfg_.dns_refresh);
        auto [ec] = co_await timer_.async_wait();
        if (!alive || ec) {
            co_return;
        }
    }
}

awaitable<void> Discovery::refresh() {
    const TaskGroup::Alive alive = tasks_.alive();
    for (auto& t : targets_) {
        co_await refresh_target(t);
        if (!alive) {
            co_return;
        }
    }
}

awaitable<void> Discovery::refresh_target(Target& t) {
    const TaskGroup::Alive alive = tasks_.alive();
    std::string host = t.name.host;
    const Resolved r = co_await resolver_->resolve(std::move(host));
    if (!alive) {
        co_return;
    }
    metrics::RouterMetrics& m = registry_.metrics();
    if (!r.ok) {
        m.discovery_resolution(t.role, metrics::DiscoveryResult::Failed, 0);
        if (r.error != t.last_error) {
            PDR_WARN(kLog, "cannot resolve " + t.name.host + " (" + t.source +
                               "; what it gave is kept as it is): " + r.error);
        }
        t.last_error = r.error;
        co_return;
    }
    t.last_error.clear();
    std::vector<config::InstanceAddress> found = addresses_of(t, r);
    m.discovery_resolution(
        t.role, found.empty() ? metrics::DiscoveryResult::Empty : metrics::DiscoveryResult::Ok,
        found.size());
    if (t.role == metrics::DiscoveryRole::Router) {
        if (on_peers_) {
            on_peers_(std::move(found));
        }
        co_return;
    }
    const Role role = t.role == metrics::DiscoveryRole::Prefill ? Role::Prefill : Role::Decode;
    std::set<std::string> names;
    for (const auto& addr : found) {
        names.insert(addr.text());
    }
    for (const auto& inst : registry_.list(role)) {
        if (inst->source == t.source && !names.contains(inst->name)) {
            registry_.drain(role, inst->name);
        }
    }
    for (auto& addr : found) {
        std::string source = t.source;
        co_await registry_.add_discovered(role, std::move(addr), std::move(source));
        if (!alive) {
            co_return;
        }
    }
}

std::vector<config::InstanceAddress> Discovery::addresses_of(const Target& t, const Resolved& r) {
    std::vector<config::InstanceAddress> found;
    std::set<std::string> names;
    for (const auto& a : r.addresses) {
        const std::string text = (a.find(':') != std::string::npos ? "[" + a + "]:" : a + ":") +
                                 std::to_string(t.name.port);
        config::InstanceAddress addr;
        std::string why;
        if (!config::parse_instance_address(text, addr, why)) {
            PDR_WARN(kLog, t.source + " gave an address that is not one: " + a + " (" + why + ")");
            continue;
        }
        if (names.insert(addr.text()).second) {
            found.push_back(std::move(addr));
        }
    }
    return found;
}

}  // namespace pdr::instances
