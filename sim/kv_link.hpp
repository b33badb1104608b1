#pragma once
// One TCP connection of the LMCache-mode KV transport with a deadline per operation (an
// expired deadline closes the socket, so the pending operation ends at once). Shared by the
// sender (prefill) and the receiver (decode).
#include "net/common/deadline.hpp"
#include "net/common/io.hpp"

#include <span>
#include <string>

namespace pdr::sim {

class KvLink {
public:
    KvLink(Socket socket, Duration timeout);
    KvLink(const KvLink&) = delete;
    KvLink& operator=(const KvLink&) = delete;

    // Connects to host:port (name or address). Returns an error message, empty on success.
    static awaitable<std::string> connect(KvLink& link, const std::string& host,
                                          unsigned short port);
    awaitable<error_code> read(std::span<unsigned char> out);  // exactly out.size() bytes
    awaitable<error_code> write(std::span<const unsigned char> in);
    void close() noexcept;
    Socket& socket() noexcept { return socket_; }
    // "timed out" when the deadline closed the socket, else ec.message().
    std::string describe(const error_code& ec) const;

private:
    void settle() noexcept;  // after an operation: remember whether it timed out, disarm

    Socket socket_;
    Duration timeout_;
    Deadline deadline_;
    bool timed_out_ = false;
};

}  // namespace pdr::sim
