#pragma once
// One data-path thread of App (app.hpp): its io_context (none for worker 0, which runs on the
// control io_context's thread), its upstream pools, its listener. Members in the reverse of
// destruction order: the io_context outlives the I/O objects on it. Internal to router/api.
#include "router/api/app.hpp"

#include <memory>
#include <optional>
#include <thread>

namespace pdr::api {

struct App::Worker {
    Worker(App& app, std::size_t number, net::io_context* control);

    std::unique_ptr<net::io_context> own_ioc;
    net::io_context& ioc;
    net::any_io_executor ex;
    upstream::Client client;
    disagg::FlowDeps deps;
    std::unique_ptr<server::HttpServer> server;
    std::optional<net::executor_work_guard<net::io_context::executor_type>> keep_running;
    std::thread thread;
    metrics::Counter& requests;  // pdrouter_worker_requests_total{worker}
};

}  // namespace pdr::api
