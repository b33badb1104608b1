#pragma once
// Small helpers of the transfer tests: a request from its parts, a region with a dense layout,
// a peer connection (failures reported through gtest).
#include <gtest/gtest.h>

#include "pdx/agent.hpp"

#include <cstdint>
#include <span>
#include <string>

namespace pdx::test {

inline TransferRequest make_req(PeerHandle peer, LayoutId ll, std::span<const BlockId> lids,
                                LayoutId rl, std::span<const BlockId> rids, std::uint64_t id,
                                Clock::time_point deadline = {}) {
    TransferRequest r;
    r.peer = peer;
    r.local_layout = ll;
    r.local_ids = lids;
    r.remote_layout = rl;
    r.remote_ids = rids;
    r.transfer_id = id;
    r.deadline = deadline;
    return r;
}

// An agent configuration for a test on `backend` over `transports` (UCX over tcp on loopback).
inline Config agent_config(const std::string& name, BackendKind backend, const char* transports,
                           ProgressMode mode) {
    Config c;
    c.name = name;
    c.backend = backend;
    c.transports = transports;
    if (c.backend == BackendKind::Ucx && c.transports.find("tcp") != std::string::npos) {
        c.net_devices = "lo";
    }
    c.progress = mode;
    return c;
}

// `blocks` blocks of `block` bytes in one new region, one dense layout.
inline LayoutId dense_pool(Agent& a, std::uint64_t block, std::uint32_t blocks) {
    auto r = a.allocate_region(block * blocks);
    EXPECT_TRUE(r) << r.message();
    auto l = a.add_layout(Layout{*r, 0, block, 0, blocks});
    EXPECT_TRUE(l) << l.message();
    return *l;
}

inline PeerHandle connect_peer(Agent& from, Agent& to) {
    auto h = from.add_peer(to.descriptor());
    EXPECT_TRUE(h) << h.message();
    return *h;
}

}  // namespace pdx::test
