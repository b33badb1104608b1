#pragma once
// Drives a pdx::Agent in EventFd progress mode from an Asio executor: waits on the agent's event
// fd, runs progress() on the executor, arms the fd and waits again. Transfer callbacks and
// notification handlers then run on that executor's thread, beside the rest of its work. A
// progress step with more work pending (arm() false) is posted rather than looped, so a busy
// agent never starves the executor's other handlers.
//
// Optional adaptor (target pdx::asio, source in transfer/asio/): pdx::transfer itself does not
// need Boost.
#include "pdx/agent.hpp"

#include <boost/asio/any_io_executor.hpp>

#include <memory>

namespace pdx {

class AsioPump {
public:
    // `agent` must be in ProgressMode::EventFd (std::invalid_argument otherwise) and outlive the
    // pump's last progress() call, that is, stop() or the pump's destruction.
    AsioPump(const boost::asio::any_io_executor& executor, Agent& agent);
    ~AsioPump();
    AsioPump(const AsioPump&) = delete;
    AsioPump& operator=(const AsioPump&) = delete;

    // Starts waiting (idempotent). Call on the executor's thread, or before it runs.
    void start();
    // Cancels the wait: once stop() returns, progress() is not called again. Call on the
    // executor's thread (or when it is not running). A pending wait's handler still runs later
    // with the cancel and touches only the pump's own state, which it keeps alive.
    void stop() noexcept;
    bool running() const noexcept;
    // progress() calls made by the pump so far (for tests and diagnostics).
    std::uint64_t steps() const noexcept;

private:
    struct State;
    std::shared_ptr<State> state_;
};

}  // namespace pdx
