#pragma once
// gtest glue: clusters owned by the test fixture, every process log printed when a test failed.
#include <gtest/gtest.h>

#include <iostream>
#include <memory>
#include <vector>

#include "tests/support/cluster.hpp"

namespace pdr::test {

class ClusterTest : public ::testing::Test {
protected:
    void TearDown() override {
        if (HasFailure()) {
            for (auto* c : watched_) {
                std::cerr << c->logs();
            }
        }
    }
    // Logs of `c` are printed if the test fails; `c` must outlive TearDown.
    void watch(Cluster& c) { watched_.push_back(&c); }
    // Starts a P/D cluster that lives as long as the test.
    PdCluster& start(const PdOptions& o) {
        owned_.push_back(std::make_unique<PdCluster>(start_pd(o)));
        watch(*owned_.back()->cluster);
        return *owned_.back();
    }
    Cluster& new_cluster() {
        plain_.push_back(std::make_unique<Cluster>());
        watch(*plain_.back());
        return *plain_.back();
    }

private:
    std::vector<Cluster*> watched_;
    std::vector<std::unique_ptr<PdCluster>> owned_;
    std::vector<std::unique_ptr<Cluster>> plain_;
};

}  // namespace pdr::test
