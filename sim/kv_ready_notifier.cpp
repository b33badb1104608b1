#include "sim/kv_ready_notifier.hpp"

#include <zmq.hpp>

#include <stdexcept>

namespace pdr::sim {

struct KvReadyNotifier::Impl {
    zmq::context_t context{1};
    zmq::socket_t socket{context, zmq::socket_type::push};
    bool open = true;
};

KvReadyNotifier::KvReadyNotifier(const std::string& endpoint) : impl_(std::make_unique<Impl>()) {
    impl_->socket.set(zmq::sockopt::linger, 0);
    impl_->socket.set(zmq::sockopt::ipv6, true);  // tcp://[v6]:PORT endpoints too
    try {
        impl_->socket.connect(endpoint);
    } catch (const zmq::error_t& e) {
        throw std::runtime_error("cannot connect the KV-ready socket to " + endpoint + ": " +
                                 e.what());
    }
}

KvReadyNotifier::~KvReadyNotifier() {
    close();
}

bool KvReadyNotifier::send(const std::vector<std::string>& frames) {
    if (!impl_->open || frames.empty()) {
        return false;
    }
    try {
        for (std::size_t i = 0; i < frames.size(); ++i) {
            auto flags = zmq::send_flags::dontwait;
            if (i + 1 < frames.size()) {
                flags = flags | zmq::send_flags::sndmore;
            }
            // The first frame decides: once it is queued, the rest of the message is too.
            if (!impl_->socket.send(zmq::buffer(frames[i]), flags)) {
                return false;
            }
        }
    } catch (const zmq::error_t&) {
        return false;
    }
    return true;
}

void KvReadyNotifier::close() noexcept {
    if (impl_ && impl_->open) {
        impl_->open = false;
        impl_->socket.close();
        impl_->context.close();
    }
}

}  // namespace pdr::sim
