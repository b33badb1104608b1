#pragma once
// --demo: two in-process pdsim engines (prefill + decode, model "pdsim-model") on 127.0.0.1
// port 0, served by their own io_context thread, used as the router's instances. In --kv-mode
// lmcache an LMCache pair, in --kv-mode push a push pair on the transfer core (UCX tcp on lo;
// refused when the build has no UCX).
#include "config/config.hpp"

#include <memory>
#include <string>

namespace pdr::router {

class Demo {
public:
    Demo();
    ~Demo();
    Demo(const Demo&) = delete;
    Demo& operator=(const Demo&) = delete;

    // Starts both engines and appends them to cfg.prefill / cfg.decode. Throws on failure.
    void start(config::Config& cfg);
    // Stops the engines and joins their thread (idempotent).
    void stop();

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

inline constexpr const char* kDemoModel = "pdsim-model";

// A curl command line that sends one completion through the router at host:port.
std::string demo_curl_line(const std::string& host, unsigned short port);

}  // namespace pdr::router
