// pdrouter: parse the configuration, configure logging, optionally start the --demo engines,
// and run the router (router/api/run.hpp) until SIGINT/SIGTERM.
#include "config/config.hpp"
#include "net/common/log.hpp"
#include "router/api/run.hpp"
#include "router/demo/demo.hpp"

#include <csignal>
#include <iostream>

int main(int argc, char** argv) {
    // SIGTERM/SIGINT wait, blocked, until run() has its handler: one that comes while the
    // configuration is read or the --demo engines start is then a drain like any other (exit 0),
    // not the default action's kill. Threads started meanwhile inherit the mask.
    sigset_t stop_signals;
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGINT);
    sigaddset(&stop_signals, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
    pdr::config::ParseOutcome outcome = pdr::config::parse_command_line(argc, argv);
    if (outcome.action == pdr::config::ParseOutcome::Action::Exit) {
        std::ostream& os = outcome.exit_code == 0 ? std::cout : std::cerr;
        os << outcome.output;
        if (!outcome.output.empty() && outcome.output.back() != '\n') {
            os << '\n';
        }
        os.flush();
        return outcome.exit_code;
    }
    pdr::config::Config cfg = std::move(outcome.config);
    pdr::log::configure(cfg.log_level, cfg.log_format);

    pdr::router::Demo demo;
    pdr::api::RunHooks hooks;
    if (cfg.demo) {
        try {
            demo.start(cfg);
        } catch (const std::exception& e) {
            std::cerr << "pdrouter: cannot start the demo engines: " << e.what() << std::endl;
            return 1;
        }
        hooks.on_listening = [](const std::string& host, unsigned short port) {
            std::cout << pdr::router::demo_curl_line(host, port) << std::endl;
        };
    }
    int code = pdr::api::run(std::move(cfg), hooks);
    demo.stop();
    return code;
}
