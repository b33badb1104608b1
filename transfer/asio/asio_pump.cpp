#include "pdx/asio_pump.hpp"

#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/post.hpp>

#include <unistd.h>

#include <stdexcept>

namespace pdx {

struct AsioPump::State : std::enable_shared_from_this<State> {
    State(const boost::asio::any_io_executor& ex, Agent& a, int fd) : agent(a), wait_fd(ex, fd) {}

    // One round: progress, then wait on the fd when nothing is pending, else come back through
    // the executor's queue.
    void step() {
        if (!running) {
            return;
        }
        agent.progress();
        ++steps;
        if (!agent.arm()) {
            boost::asio::post(wait_fd.get_executor(),
                              [self = shared_from_this()] { self->step(); });
            return;
        }
        wait_fd.async_wait(boost::asio::posix::stream_descriptor::wait_read,
                           [self = shared_from_this()](const boost::system::error_code& ec) {
                               if (!ec) {
                                   self->step();
                               }
                           });
    }

    Agent& agent;
    // A duplicate of the agent's fd: closing it (with the state) leaves the agent's own open.
    boost::asio::posix::stream_descriptor wait_fd;
    bool running = false;
    std::uint64_t steps = 0;
};

namespace {

int dup_event_fd(const Agent& agent) {
    const int fd = agent.event_fd();
    if (fd < 0) {
        throw std::invalid_argument("pdx::AsioPump needs an agent in ProgressMode::EventFd");
    }
    const int copy = ::dup(fd);
    if (copy < 0) {
        throw std::system_error(errno, std::generic_category(), "pdx::AsioPump: dup(event_fd)");
    }
    return copy;
}

}  // namespace

AsioPump::AsioPump(const boost::asio::any_io_executor& executor, Agent& agent)
    : state_(std::make_shared<State>(executor, agent, dup_event_fd(agent))) {}

AsioPump::~AsioPump() {
    stop();
}

void AsioPump::start() {
    if (state_->running) {
        return;
    }
    state_->running = true;
    state_->step();
}

void AsioPump::stop() noexcept {
    if (!state_->running) {
        return;
    }
    state_->running = false;
    boost::system::error_code ignored;
    state_->wait_fd.cancel(ignored);
}

bool AsioPump::running() const noexcept {
    return state_->running;
}

std::uint64_t AsioPump::steps() const noexcept {
    return state_->steps;
}

}  // namespace pdx
