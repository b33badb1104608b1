#include "router/demo/demo.hpp"

#include "net/common/io.hpp"
#include "net/common/log.hpp"
#include "pdx/agent.hpp"
#include "sim/sim_server.hpp"

#include <future>
#include <optional>
#include <stdexcept>
#include <thread>

namespace pdr::router {

namespace {

// tcp://HOST:PORT with a free port when none (or 0, or *) is given; HOST 127.0.0.1 by default.
std::string demo_kv_ready_bind(const std::string& given) {
    std::string host = "127.0.0.1";
    if (!given.empty()) {
        const auto colon = given.rfind(':');
        const std::string port = given.substr(colon + 1);
        host = given.substr(6, colon - 6);
        if (port != "0" && port != "*") {
            return given;
        }
    }
    net::io_context ioc;
    net::ip::tcp::acceptor probe(ioc,
                                 net::ip::tcp::endpoint(net::ip::make_address("127.0.0.1"), 0));
    const unsigned short port = probe.local_endpoint().port();
    return "tcp://" + host + ":" + std::to_string(port);
}

// The address the prefill's PUSH socket connects to: the bind address, loopback for a wildcard.
std::string demo_kv_ready_connect(const std::string& bind) {
    const auto colon = bind.rfind(':');
    std::string host = bind.substr(6, colon - 6);
    if (host == "*" || host == "0.0.0.0") {
        host = "127.0.0.1";
    }
    return "tcp://" + host + bind.substr(colon);
}

}  // namespace

struct Demo::Impl {
    net::io_context ioc{1};
    std::optional<net::executor_work_guard<net::io_context::executor_type>> guard;
    std::unique_ptr<sim::SimServer> prefill, decode;
    std::thread thread;
    bool running = false;
};

Demo::Demo() : impl_(std::make_unique<Impl>()) {}

Demo::~Demo() {
    stop();
}

void Demo::start(config::Config& cfg) {
    Impl& d = *impl_;
    auto make = [&](sim::Role role) {
        sim::SimConfig sc;
        sc.role = role;
        sc.host = "127.0.0.1";
        sc.port = 0;
        sc.model = kDemoModel;
        sc.token_delay = cfg.demo_token_delay;
        sc.kv_lease_seconds = std::chrono::duration<double>(cfg.kv_lease_timeout).count();
        if (cfg.kv_mode == config::KvMode::Lmcache) {
            // An LMCache pair: P sends the KV to D's receiver (TP 1) and notifies the router.
            sc.kv_mode = sim::KvMode::Lmcache;
            sc.lmcache.kv_ready_connect = demo_kv_ready_connect(cfg.kv_ready_bind);
        } else if (cfg.kv_mode == config::KvMode::Push) {
            // A push pair on the transfer core: P writes into the blocks D registers, over UCX
            // tcp on loopback (two agents in one process; no device but lo is needed).
            sc.kv_mode = sim::KvMode::Push;
            sc.kv_transfer = sim::KvTransfer::Pdx;
            sc.kv_transports = "tcp";
            sc.kv_net_devices = "lo";
        }
        return std::make_unique<sim::SimServer>(d.ioc.get_executor(), sc);
    };
    const bool lmcache = cfg.kv_mode == config::KvMode::Lmcache;
    const bool push = cfg.kv_mode == config::KvMode::Push;
    if (push && !pdx::ucx_available()) {
        throw std::runtime_error(
            "--demo --kv-mode push needs the UCX transfer core (pdx), and this build has no UCX; "
            "use --demo with --kv-mode pull or lmcache");
    }
    if (lmcache) {
        // The prefill must know where to notify before the router binds: a free port now.
        cfg.kv_ready_bind = demo_kv_ready_bind(cfg.kv_ready_bind);
    }
    d.prefill = make(sim::Role::Prefill);
    d.decode = make(sim::Role::Decode);
    const unsigned short p_port = d.prefill->start();
    const unsigned short d_port = d.decode->start();
    cfg.prefill.push_back(config::InstanceAddress{"127.0.0.1", p_port});
    cfg.decode.push_back(config::InstanceAddress{"127.0.0.1", d_port});
    if (lmcache) {
        const sim::LmcacheConfig& rx = d.decode->config().lmcache;
        cfg.lmcache_receivers.push_back(config::LmcacheReceiver{"", rx.init_ports, rx.alloc_ports});
    }
    if (push) {
        // The router names P by its engine id; pdsim's side channel is its HTTP port.
        cfg.prefill_engine_ids.push_back(d.prefill->config().engine_id);
        cfg.prefill_side_channel_ports.push_back(p_port);
    }
    d.guard.emplace(d.ioc.get_executor());
    d.thread = std::thread([&d] { d.ioc.run(); });
    d.running = true;
    PDR_INFO("demo", "pdsim prefill on 127.0.0.1:" + std::to_string(p_port) +
                         ", decode on 127.0.0.1:" + std::to_string(d_port));
}

void Demo::stop() {
    Impl& d = *impl_;
    if (!d.running) {
        return;
    }
    d.running = false;
    std::promise<void> done;
    auto stopped = done.get_future();
    net::co_spawn(
        d.ioc,
        [&d]() -> awaitable<void> {
            co_await d.prefill->stop();
            co_await d.decode->stop();
        },
        [&done](std::exception_ptr) { done.set_value(); });
    stopped.wait_for(std::chrono::seconds(5));
    d.guard.reset();
    d.ioc.stop();
    d.thread.join();
    d.prefill.reset();
    d.decode.reset();
}

std::string demo_curl_line(const std::string& host, unsigned short port) {
    std::string h = host;
    if (h.empty() || h == "0.0.0.0") {
        h = "127.0.0.1";
    } else if (h == "::") {
        h = "::1";
    }
    const std::string authority = config::InstanceAddress{h, port}.text();
    return "curl -s http://" + authority +
           "/v1/completions -H 'Content-Type: application/json' -d '{\"model\":\"" + kDemoModel +
           "\",\"prompt\":\"Hello\",\"max_tokens\":8}'";
}

}  // namespace pdr::router
