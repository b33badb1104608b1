// pdsim: an emulated vLLM engine (see docs/pdsim.md).
#include "net/common/log.hpp"
#include "sim/sim_server.hpp"

#include <exception>
#include <iostream>

namespace {

pdr::awaitable<void> stop_on_signal(pdr::net::signal_set& signals, pdr::sim::SimServer& sim,
                                    pdr::net::io_context& ioc) {
    auto [ec, signo] = co_await signals.async_wait(pdr::use_tuple);
    if (!ec) {
        PDR_INFO("pdsim", "signal " + std::to_string(signo) + ", stopping");
        co_await sim.stop();
    }
    ioc.stop();
}

}  // namespace

int main(int argc, char** argv) {
    pdr::sim::SimConfig cfg;
    std::string port_file;
    std::string log_level = "info";
    if (int rc = pdr::sim::parse_args(argc, argv, cfg, port_file, log_level); rc != 0) {
        return rc == 1 ? 0 : rc;
    }
    pdr::log::Level level = pdr::log::Level::Info;
    pdr::log::parse_level(log_level, level);
    pdr::log::configure(level, pdr::log::Format::Text);
    try {
        pdr::net::io_context ioc{1};
        pdr::sim::SimServer sim(ioc.get_executor(), cfg);
        const unsigned short port = sim.start();
        const std::string& host = sim.config().host;
        const bool v6 = host.find(':') != std::string::npos;
        std::cout << "pdsim listening on " << (v6 ? "[" + host + "]" : host) << ':' << port
                  << std::endl;
        // The receiver ports first: once the port file is there, both are.
        if (!sim.config().lmcache.ports_file.empty()) {
            pdr::sim::write_lmcache_ports_file(sim.config().lmcache.ports_file,
                                               sim.config().lmcache);
        }
        if (!port_file.empty()) {
            pdr::sim::write_port_file(port_file, port);
        }
        pdr::net::signal_set signals(ioc, SIGINT, SIGTERM);
        pdr::net::co_spawn(ioc, stop_on_signal(signals, sim, ioc), pdr::net::detached);
        ioc.run();
    } catch (const std::exception& e) {
        std::cerr << "pdsim: " << e.what() << '\n';
        return 1;
    }
    return 0;
}
