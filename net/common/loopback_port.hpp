#pragma once
// A loopback TCP port for tools that must name a port before the process that binds it starts
// (a ZMQ PULL address the prefills connect to, a listener given on a command line). Free on
// 127.0.0.1 and ::1 (where the host has IPv6) when this returns, and chosen outside the kernel's
// ephemeral range (/proc/sys/net/ipv4/ip_local_port_range): a port from that range can be taken
// by any outgoing connection on the host before the caller binds it, which parallel test runs
// do all the time. Not used by the product itself; tests and benchmarks only.

namespace pdr {

// Throws std::runtime_error when no candidate was free after a bounded number of tries.
unsigned short pick_loopback_port();

}  // namespace pdr
