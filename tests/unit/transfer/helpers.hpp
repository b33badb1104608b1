#pragma once
// Small helpers of the transfer tests: a request from its parts, a region with a dense layout,
// a peer connection (failures reported through gtest).
#include <gtest/gtest.h>

#include "pdx/agent.hpp"

#include <cstdint>
#include <memory>
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

// Two loopback agents made from `cfg` (names "a" and "b"), each with a dense pool of `blocks`
// 4 KiB blocks, added as peers both ways.
struct LoopbackPair {
    std::unique_ptr<Agent> a, b;
    LayoutId la = 0, lb = 0;
    PeerHandle a_to_b = kNoPeer;
};
inline LoopbackPair loopback_pair(Config cfg, std::uint32_t blocks = 16) {
    LoopbackPair p;
    cfg.backend = BackendKind::Loopback;
    cfg.name = "a";
    auto a = Agent::create(cfg);
    cfg.name = "b";
    auto b = Agent::create(cfg);
    EXPECT_TRUE(a && b);
    if (!a || !b) {
        return p;
    }
    p.a = std::move(*a);
    p.b = std::move(*b);
    p.la = dense_pool(*p.a, 4096, blocks);
    p.lb = dense_pool(*p.b, 4096, blocks);
    p.a_to_b = connect_peer(*p.a, *p.b);
    connect_peer(*p.b, *p.a);
    return p;
}

}  // namespace pdx::test
