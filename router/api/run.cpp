#include "router/api/run.hpp"

#include "net/common/log.hpp"
#include "router/api/app.hpp"

#include <sched.h>

#include <algorithm>
#include <charconv>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <string_view>
#include <thread>

namespace pdr::api {

namespace {

struct RunState {
    net::io_context& ioc;
    App& app;
    const RunHooks& hooks;
    net::signal_set signals;
    int exit_code = 0;
};

void fail_startup(RunState& s, int code, const std::string& message) {
    std::cerr << "pdrouter: " << message << std::endl;
    s.exit_code = code;
    error_code ec;
    s.signals.cancel(ec);
    s.ioc.stop();
}

// A second SIGTERM/SIGINT while draining: the operator wants out now.
awaitable<void> end_grace_on_signal(RunState& s) {
    auto [ec, signo] = co_await s.signals.async_wait(use_tuple);
    if (!ec) {
        PDR_WARN("main", "signal " + std::to_string(signo) + " again: ending the grace now");
        s.app.end_grace();
    }
}

awaitable<void> run_main(RunState& s) {
    const config::Config& cfg = s.app.config();
    if (!co_await s.app.probe_instances()) {
        fail_startup(s, 2,
                     "an instance does not serve model '" + cfg.model +
                         "' (see the log above); check --model and the instance addresses");
        co_return;
    }
    std::string kv_ready_error;
    if (!s.app.bind_kv_ready(kv_ready_error)) {
        fail_startup(s, 1,
                     "cannot bind --kv-ready-bind " + cfg.kv_ready_bind + ": " + kv_ready_error);
        co_return;
    }
    std::string agent_error;
    if (!s.app.start_transfer_agent(agent_error)) {
        fail_startup(s, 1, agent_error + " (--transfer-agent)");
        co_return;
    }
    unsigned short port = 0;
    try {
        port = s.app.listen();
    } catch (const std::exception& e) {
        fail_startup(s, 1,
                     "cannot listen on " + config::InstanceAddress{cfg.host, cfg.port}.text() +
                         ": " + e.what());
        co_return;
    }
    if (const std::string self = s.app.self_instance(); !self.empty()) {
        fail_startup(s, 2,
                     self +
                         " is this router's own listen address: requests sent there would "
                         "come back to the router (a loop)");
        co_return;
    }
    s.app.start();
    const std::string host_port = config::InstanceAddress{cfg.host, port}.text();
    std::cout << "pdrouter listening on " << host_port << std::endl;
    PDR_INFO("main", "listening on " + host_port + " (" + std::to_string(cfg.prefill.size()) +
                         " prefill, " + std::to_string(cfg.decode.size()) + " decode)");
    // The port file is the readiness signal for scripts and tests: it is written last, once
    // everything startup prints is out, so a reader that sees it also sees the lines above.
    if (!cfg.port_file.empty()) {
        std::string error;
        if (!write_port_file(cfg.port_file, port, error)) {
            fail_startup(s, 1, error);
            co_return;
        }
    }
    if (s.hooks.on_listening) {
        s.hooks.on_listening(cfg.host, port);
    }
    auto [ec, signo] = co_await s.signals.async_wait(use_tuple);
    if (ec) {
        co_return;
    }
    PDR_INFO("main", "signal " + std::to_string(signo) + ": draining (grace " +
                         std::to_string(cfg.shutdown_grace.count()) +
                         " ms; a second signal ends it now)");
    net::co_spawn(s.app.control_executor(), end_grace_on_signal(s), net::detached);
    co_await s.app.shutdown(cfg.shutdown_grace);
    error_code ignored;
    s.signals.cancel(ignored);
    PDR_INFO("main", "stopped");
    s.ioc.stop();
}

}  // namespace

bool write_port_file(const std::string& path, unsigned short port, std::string& error) {
    const std::string tmp = path + ".tmp";
    {
        std::ofstream out(tmp, std::ios::trunc);
        out << port << '\n';
        out.flush();
        if (!out) {
            error = "cannot write port file " + tmp;
            return false;
        }
    }
    if (std::rename(tmp.c_str(), path.c_str()) != 0) {
        error = "cannot rename " + tmp + " to " + path;
        std::remove(tmp.c_str());
        return false;
    }
    return true;
}

std::size_t quota_cores(std::string_view cpu_max) {
    // cgroup v2 cpu.max: "<quota> <period>" in microseconds, or "max <period>" for no quota.
    const auto space = cpu_max.find(' ');
    if (space == std::string_view::npos) {
        return 0;
    }
    const std::string_view quota = cpu_max.substr(0, space);
    std::string_view period = cpu_max.substr(space + 1);
    while (!period.empty() && (period.back() == '\n' || period.back() == ' ')) {
        period.remove_suffix(1);
    }
    unsigned long long q = 0;
    unsigned long long p = 0;
    const auto qr = std::from_chars(quota.data(), quota.data() + quota.size(), q);
    const auto pr = std::from_chars(period.data(), period.data() + period.size(), p);
    if (qr.ec != std::errc{} || qr.ptr != quota.data() + quota.size() || pr.ec != std::errc{} ||
        pr.ptr != period.data() + period.size() || q == 0 || p == 0) {
        return 0;
    }
    return static_cast<std::size_t>((q + p - 1) / p);  // a part of a core is a thread
}

std::size_t worker_threads(const config::Config& cfg) {
    if (cfg.threads > 0) {
        return cfg.threads;
    }
    std::size_t n = std::max(1u, std::thread::hardware_concurrency());
    cpu_set_t cpus;
    CPU_ZERO(&cpus);
    if (sched_getaffinity(0, sizeof(cpus), &cpus) == 0 && CPU_COUNT(&cpus) > 0) {
        n = static_cast<std::size_t>(CPU_COUNT(&cpus));
    }
    // A container's CPU limit (cgroup v2): no more threads than the cores it may use.
    std::ifstream cpu_max("/sys/fs/cgroup/cpu.max");
    std::string line;
    if (cpu_max && std::getline(cpu_max, line)) {
        if (const std::size_t cores = quota_cores(line); cores > 0) {
            n = std::min(n, cores);
        }
    }
    return std::max<std::size_t>(n, 1);
}

int run(config::Config cfg, const RunHooks& hooks) {
    std::signal(SIGPIPE, SIG_IGN);
    net::io_context ioc(kIoConcurrencyHint);
    const std::size_t workers = worker_threads(cfg);
    App app(ioc, std::move(cfg), workers);
    RunState state{ioc, app, hooks, net::signal_set(ioc, SIGINT, SIGTERM)};
    // main() blocked them until this handler existed; one that came meanwhile is delivered now.
    sigset_t stop_signals;
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGINT);
    sigaddset(&stop_signals, SIGTERM);
    pthread_sigmask(SIG_UNBLOCK, &stop_signals, nullptr);
    // The start-up, the signal wait and the shutdown are control work: on the control executor.
    net::co_spawn(app.control_executor(), run_main(state), [&state](std::exception_ptr e) {
        if (!e) {
            return;
        }
        try {
            std::rethrow_exception(e);
        } catch (const std::exception& ex) {
            fail_startup(state, 1, std::string("fatal: ") + ex.what());
        }
    });
    ioc.run();
    app.join_workers();
    return state.exit_code;
}

}  // namespace pdr::api
