#pragma once
// Bounded waiting for the transfer tests: polls `cond` every millisecond, driving the progress of
// `drive` (EventFd-mode agents) in between, until it holds or `timeout` passes.
#include "pdx/agent.hpp"

#include <chrono>
#include <initializer_list>
#include <thread>

namespace pdx::test {

template <class F>
bool eventually(F cond, std::initializer_list<Agent*> drive = {},
                std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
    const auto until = Clock::now() + timeout;
    while (Clock::now() < until) {
        for (Agent* a : drive) {
            a->progress();
        }
        if (cond()) {
            return true;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return cond();
}

}  // namespace pdx::test
