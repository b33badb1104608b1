#include "net/common/loopback_port.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <random>
#include <stdexcept>

namespace pdr {
namespace {

// Whether `port` can be bound on `family`'s loopback now. A family the host lacks counts as free.
bool bindable(int family, unsigned short port) {
    const int fd = ::socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        return family == AF_INET6 && errno == EAFNOSUPPORT;
    }
    const int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);  // as listeners bind
    int rc = 0;
    if (family == AF_INET) {
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        a.sin_port = htons(port);
        rc = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
    } else {
        sockaddr_in6 a{};
        a.sin6_family = AF_INET6;
        a.sin6_addr = in6addr_loopback;
        a.sin6_port = htons(port);
        rc = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
        if (rc != 0 && errno == EADDRNOTAVAIL) {
            rc = 0;  // IPv6 present but no ::1 (disabled on lo)
        }
    }
    ::close(fd);
    return rc == 0;
}

}  // namespace

unsigned short pick_loopback_port() {
    int lo = 32768, hi = 60999;  // Linux's default ephemeral range
    std::ifstream("/proc/sys/net/ipv4/ip_local_port_range") >> lo >> hi;
    // The larger of the two ranges outside [lo, hi], never the privileged ports.
    int from = 10000, to = lo - 1;
    if (hi < 65535 && 65535 - hi > to - from) {
        from = hi + 1;
        to = 65535;
    }
    if (to - from < 100) {
        from = 1024;
        to = 65535;
    }
    std::mt19937 rng{std::random_device{}()};
    std::uniform_int_distribution<int> pick(from, to);
    for (int i = 0; i < 500; ++i) {
        const auto port = static_cast<unsigned short>(pick(rng));
        if (bindable(AF_INET, port) && bindable(AF_INET6, port)) {
            return port;
        }
    }
    throw std::runtime_error(
        "pick_loopback_port: no free loopback port outside the ephemeral range");
}

}  // namespace pdr
