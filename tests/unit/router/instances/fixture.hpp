#pragma once
// Shared fixture for the instance registry tests: one io_context, metrics, config, a real
// upstream client, and the Registry under test.
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "config/config.hpp"
#include "net/upstream/client.hpp"
#include "router/instances/registry.hpp"
#include "router/metrics/router_metrics.hpp"
#include "tests/mocks/fake_http_server.hpp"
#include "tests/mocks/run_until.hpp"
#include "tests/unit/router/metrics/series_value.hpp"

namespace pdr::instances {

class RegistryTest : public ::testing::Test {
protected:
    RegistryTest() {
        cfg.connect_timeout = Duration{500};
        cfg.health_interval = Duration{100};
        cfg.health_backoff_max = Duration{200};
    }
    ~RegistryTest() override {
        if (registry) {
            registry->stop();
        }
        test::run_for(ioc, Duration{20});
    }

    Registry& reg() {
        if (!registry) {
            registry = std::make_unique<Registry>(ioc.get_executor(), client, rm, cfg);
        }
        return *registry;
    }

    static config::InstanceAddress addr(std::string host, unsigned short port) {
        return config::InstanceAddress{std::move(host), port};
    }

    net::io_context ioc;
    metrics::Registry mreg;
    metrics::RouterMetrics rm{mreg};
    config::Config cfg;
    upstream::Client client{ioc.get_executor()};
    std::unique_ptr<Registry> registry;
};

// A model server: GET /v1/models lists `model`; anything else is 404.
inline test::FakeHttpServer::Handler serving(std::string model) {
    return [model](const test::FakeHttpServer::Request& req) {
        if (req.target() == "/v1/models") {
            nlohmann::json j{{"object", "list"}, {"data", {{{"id", model}, {"object", "model"}}}}};
            return test::FakeReply{200, j.dump()};
        }
        return test::FakeReply{404, "{}"};
    };
}

// pdrouter_instances{role,health} as last set by the Registry.
inline double instances_gauge(metrics::Registry& r, std::string role, std::string health) {
    return metrics::series_value(r, "pdrouter_instances", {{"role", role}, {"health", health}})
        .value_or(-1);
}

}  // namespace pdr::instances
