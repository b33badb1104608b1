#pragma once
// Test helpers: drive an io_context until a condition holds, with a bounded deadline.
#include <exception>
#include <memory>
#include <optional>
#include <thread>

#include "net/common/io.hpp"

namespace pdr::test {

// Runs `ioc` in short slices until `pred()` is true or `limit` has passed; returns pred().
template <class Pred>
bool run_until(net::io_context& ioc, Pred pred, Duration limit) {
    const auto deadline = Clock::now() + limit;
    while (!pred()) {
        if (Clock::now() >= deadline) {
            return false;
        }
        ioc.restart();
        ioc.run_for(Duration{5});
        if (ioc.stopped()) {
            std::this_thread::sleep_for(Duration{1});  // no work: don't spin
        }
    }
    return true;
}

// Runs `ioc` for `d` (all handlers that become ready meanwhile run).
inline void run_for(net::io_context& ioc, Duration d) {
    const auto deadline = Clock::now() + d;
    while (Clock::now() < deadline) {
        ioc.restart();
        ioc.run_for(Duration{5});
        if (ioc.stopped()) {
            std::this_thread::sleep_for(Duration{1});
        }
    }
}

// Runs the awaitable to completion (bounded); nullopt if it did not finish in time.
template <class T>
std::optional<T> run_task(net::io_context& ioc, awaitable<T> task, Duration limit) {
    auto out = std::make_shared<std::optional<T>>();
    auto error = std::make_shared<std::exception_ptr>();
    net::co_spawn(ioc, std::move(task), [out, error](std::exception_ptr e, T v) {
        if (e) {
            *error = e;
        } else {
            *out = std::move(v);
        }
    });
    run_until(
        ioc, [&] { return out->has_value() || *error; }, limit);
    if (*error) {
        std::rethrow_exception(*error);
    }
    return *out;
}

}  // namespace pdr::test
