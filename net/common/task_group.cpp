#include "net/common/task_group.hpp"

#include "net/common/log.hpp"

namespace pdr {

struct TaskGroup::State {
    explicit State(net::any_io_executor e) : ex(e), stop_event(e, Clock::time_point::max()) {}
    net::any_io_executor ex;
    Timer stop_event;  // never expires; stop() cancels it
    // One signal per running task, shared with the task's completion handler so it outlives the
    // coroutine and its slot.
    std::list<std::shared_ptr<net::cancellation_signal>> signals;
    bool stopped = false;
    bool destroyed = false;
};

namespace {

// Errors as values after a stop, as for every other co_await of the data path.
awaitable<void> run_task(awaitable<void> task) {
    co_await net::this_coro::throw_if_cancelled(false);
    co_await std::move(task);
}

}  // namespace

TaskGroup::TaskGroup(net::any_io_executor ex) : state_(std::make_shared<State>(std::move(ex))) {}

TaskGroup::~TaskGroup() {
    state_->destroyed = true;
    stop();
}

void TaskGroup::spawn(awaitable<void> task) {
    if (state_->stopped) {
        return;
    }
    auto signal = std::make_shared<net::cancellation_signal>();
    auto it = state_->signals.insert(state_->signals.end(), signal);
    auto slot = signal->slot();
    net::co_spawn(state_->ex, run_task(std::move(task)),
                  net::bind_cancellation_slot(slot, [state = state_, signal,
                                                     it](const std::exception_ptr& e) {
                      state->signals.erase(it);
                      if (!e) {
                          return;
                      }
                      try {
                          std::rethrow_exception(e);
                      } catch (const std::exception& ex) {
                          PDR_ERROR("tasks", std::string("background task failed: ") + ex.what());
                      }
                  }));
}

void TaskGroup::stop() noexcept {
    if (state_->stopped) {
        return;
    }
    state_->stopped = true;
    state_->stop_event.cancel();
    // Emitted from a handler on the executor: co_spawn passes a cancellation on to its coroutine
    // through the executor, at once when it runs there and later otherwise, when a task that
    // ended meanwhile would be gone. Tasks that ended by then left the list.
    net::post(state_->ex, [state = state_] {
        // A task's completion handler erases its own entry: emit on a copy.
        const auto signals = state->signals;
        for (const auto& s : signals) {
            s->emit(net::cancellation_type::terminal);
        }
    });
}

bool TaskGroup::stopped() const noexcept {
    return state_->stopped;
}

std::size_t TaskGroup::running() const noexcept {
    return state_->signals.size();
}

awaitable<void> TaskGroup::until_stopped() {
    // The state, not `this`: the group may be destroyed while a caller waits.
    const std::shared_ptr<State> s = state_;
    if (!s->stopped) {
        co_await s->stop_event.async_wait();
    }
}

TaskGroup::Alive::operator bool() const noexcept {
    return state_ != nullptr && !state_->destroyed;
}

}  // namespace pdr
