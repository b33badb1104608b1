#pragma once
// Fixture of the transfer-core regression suites (peers_regression_test.cpp,
// core_regression_test.cpp): every test runs on loopback, UCX over tcp (127.0.0.1) and UCX over
// shared memory, like tests/unit/transfer/agent_test.cpp.
#include <gtest/gtest.h>

#include <memory>
#include <ostream>
#include <span>
#include <string>

#include "pdx/agent.hpp"
#include "tests/unit/transfer/eventually.hpp"
#include "tests/unit/transfer/helpers.hpp"

namespace pdx::test {

using namespace std::chrono_literals;

struct BackendParam {
    const char* label;
    BackendKind backend;
    const char* transports;
};
inline void PrintTo(const BackendParam& p, std::ostream* os) {
    *os << p.label;
}

inline constexpr std::uint64_t kBlock = 4096;
inline constexpr std::uint32_t kBlocks = 8;

class BackendTest : public ::testing::TestWithParam<BackendParam> {
protected:
    Config config(const std::string& name, ProgressMode mode = ProgressMode::Thread) const {
        return test::agent_config(name, GetParam().backend, GetParam().transports, mode);
    }
    std::unique_ptr<Agent> make(const Config& c) {
        auto a = Agent::create(c);
        EXPECT_TRUE(a) << a.message();
        return a ? std::move(*a) : nullptr;
    }
    std::unique_ptr<Agent> make(const std::string& name, ProgressMode mode = ProgressMode::Thread) {
        return make(config(name, mode));
    }
    // kBlocks blocks of kBlock bytes in one new region, one dense layout.
    static LayoutId pool(Agent& a) { return test::dense_pool(a, kBlock, kBlocks); }
    static PeerHandle connect(Agent& from, Agent& to) { return test::connect_peer(from, to); }
    // One block from `from` to `to`'s block 0; true when it ended Ok.
    static bool write_ok(Agent& from, PeerHandle peer, LayoutId ll, LayoutId rl, std::uint64_t id) {
        const BlockId one[] = {0};
        auto h = from.write_blocks(make_req(peer, ll, one, rl, one, id));
        EXPECT_TRUE(h) << h.message();
        return h && from.wait(*h, 10s) == Status::Ok;
    }
    void SetUp() override {
        if (GetParam().backend == BackendKind::Ucx && !ucx_available()) {
            GTEST_SKIP() << "no UCX";
        }
    }
};

inline auto backend_params() {
    return ::testing::Values(BackendParam{"loopback", BackendKind::Loopback, ""},
                             BackendParam{"ucx_tcp", BackendKind::Ucx, "tcp"},
                             BackendParam{"ucx_shm", BackendKind::Ucx, "posix,self"});
}
inline std::string backend_label(const ::testing::TestParamInfo<BackendParam>& p) {
    return p.param.label;
}

}  // namespace pdx::test
