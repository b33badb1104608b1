#pragma once
// Background coroutines an object owns (a loop, its probes, its refreshes): spawned on one
// executor and stopped together. stop() cancels each task still running (terminal
// cancellation through the task's own slot: the co_await it is in completes with
// operation_aborted, errors as values) and refuses new ones. A task may resume after its owner
// is gone; it keeps an Alive token and checks it after each co_await, touching nothing of the
// owner once it is false. Not thread-safe: use it on its executor's thread.
#include "net/common/io.hpp"

#include <list>
#include <memory>

namespace pdr {

class TaskGroup {
    struct State;

public:
    explicit TaskGroup(net::any_io_executor ex);
    // Stops the tasks; their tokens turn false.
    ~TaskGroup();
    TaskGroup(const TaskGroup&) = delete;
    TaskGroup& operator=(const TaskGroup&) = delete;

    // Runs `task` until it ends or the group stops; a no-op once stopped. A task that throws is
    // logged, never rethrown.
    void spawn(awaitable<void> task);
    // Cancels every running task (from a handler on the executor, soon after the call) and
    // refuses new ones. Idempotent.
    void stop() noexcept;
    bool stopped() const noexcept;
    std::size_t running() const noexcept;
    // Completes when the group stops (at once if it has): for work that is not a task of the
    // group, such as a caller's own request, to race against the stop with `||`.
    awaitable<void> until_stopped();

    // True while the group exists (stopped or not): what a task checks after each co_await
    // before it touches its owner.
    class Alive {
    public:
        explicit operator bool() const noexcept;

    private:
        friend class TaskGroup;
        explicit Alive(std::shared_ptr<const State> s) : state_(std::move(s)) {}
        std::shared_ptr<const State> state_;
    };
    Alive alive() const { return Alive(state_); }

private:
    std::shared_ptr<State> state_;
};

}  // namespace pdr
