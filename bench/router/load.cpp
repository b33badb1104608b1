#include "bench/router/load.hpp"

#include <algorithm>
#include <cmath>

namespace pdr::bench {
namespace {

struct Shared {
    const LoadSpec& spec;
    upstream::Client& client;
    std::size_t to_issue;  // requests still to start in this phase
    Clock::time_point deadline;
    LoadResult* result;  // null during warm-up
};

upstream::Request make_request(const LoadSpec& spec) {
    upstream::Request req{http::verb::post, spec.path, 11};
    req.set(http::field::content_type, "application/json");
    req.keep_alive(true);
    req.body() = spec.body;
    return req;
}

double ms_since(Clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

awaitable<void> worker(Shared& s) {
    const upstream::Timeouts timeouts{Duration{5'000}, Duration{30'000}, Duration{30'000}};
    std::string body;
    while (s.to_issue > 0 && Clock::now() < s.deadline) {
        --s.to_issue;
        auto t0 = Clock::now();
        bool ok = false;
        double ttfb = 0;
        std::string error;
        if (s.spec.stream) {
            auto opened = co_await s.client.open(s.spec.target, make_request(s.spec), timeouts);
            if (opened.stream && opened.stream->status() == 200) {
                body.clear();
                upstream::Failure f = upstream::Failure::None;
                while (!opened.stream->done()) {
                    f = co_await opened.stream->read_some(body);
                    if (f != upstream::Failure::None) {
                        break;
                    }
                    if (ttfb == 0 && !body.empty()) {
                        ttfb = ms_since(t0);
                    }
                }
                ok = f == upstream::Failure::None && body.find("[DONE]") != std::string::npos;
                if (!ok) {
                    error = "stream: " + std::string(upstream::to_string(f));
                }
            } else {
                error = opened.stream ? "status " + std::to_string(opened.stream->status())
                                      : "open: " + std::string(upstream::to_string(opened.failure));
            }
        } else {
            auto res = co_await s.client.request(s.spec.target, make_request(s.spec), timeouts);
            ok = res.ok() && res.response.result_int() == 200;
            ttfb = ms_since(t0);
            if (!ok) {
                error = res.ok() ? "status " + std::to_string(res.response.result_int())
                                 : std::string(upstream::to_string(res.failure));
            }
        }
        if (s.result == nullptr) {
            continue;
        }
        if (ok) {
            ++s.result->ok;
            s.result->latency_ms.push_back(ms_since(t0));
            s.result->ttfb_ms.push_back(ttfb);
        } else {
            ++s.result->failed;
            if (s.result->first_error.empty()) {
                s.result->first_error = error;
            }
        }
    }
}

void run_phase(const LoadSpec& spec, std::size_t count, LoadResult* result) {
    net::io_context io;
    upstream::PoolLimits limits;
    limits.max_idle_per_endpoint = spec.concurrency * 2;
    upstream::Client client(io.get_executor(), limits);
    Shared shared{spec, client, count, Clock::now() + spec.time_limit, result};
    for (std::size_t i = 0; i < spec.concurrency; ++i) {
        net::co_spawn(io, worker(shared), net::detached);
    }
    auto t0 = Clock::now();
    io.run();
    if (result != nullptr) {
        result->seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    }
}

}  // namespace

double percentile(std::vector<double> v, double p) {
    if (v.empty()) {
        return 0;
    }
    std::sort(v.begin(), v.end());
    auto rank = static_cast<std::size_t>(std::ceil(p / 100.0 * static_cast<double>(v.size())));
    return v[std::clamp<std::size_t>(rank, 1, v.size()) - 1];
}

LoadResult run_load(const LoadSpec& spec) {
    run_phase(spec, spec.warmup, nullptr);
    LoadResult result;
    result.latency_ms.reserve(spec.requests);
    result.ttfb_ms.reserve(spec.requests);
    run_phase(spec, spec.requests, &result);
    return result;
}

}  // namespace pdr::bench
