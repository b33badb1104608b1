#include "router/demo/demo.hpp"

#include "net/common/io.hpp"
#include "net/common/log.hpp"
#include "sim/sim_server.hpp"

#include <future>
#include <optional>
#include <thread>

namespace pdr::router {

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
        return std::make_unique<sim::SimServer>(d.ioc.get_executor(), sc);
    };
    d.prefill = make(sim::Role::Prefill);
    d.decode = make(sim::Role::Decode);
    const unsigned short p_port = d.prefill->start();
    const unsigned short d_port = d.decode->start();
    cfg.prefill.push_back(config::InstanceAddress{"127.0.0.1", p_port});
    cfg.decode.push_back(config::InstanceAddress{"127.0.0.1", d_port});
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
