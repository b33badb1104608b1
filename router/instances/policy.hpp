#pragma once
// Selection policies (--prefill-policy, --decode-policy): which of a role's instances takes the
// next request. The Registry filters the candidates (up, not removed, not excluded, usable in
// the KV mode) and a Policy chooses among them; it sees the whole list so that round robin and
// the hash ring stay stable while instances come and go.
//
//   round_robin        the next candidate after the last one chosen, in list order
//   least_outstanding  the lowest load (Instance::load: in-flight requests, each weighted by
//                      its prompt length for prefill); ties go round robin
//   power_of_two       two distinct candidates at random, the lower load of the two
//   prefix_affinity    consistent hashing of the prompt's first characters (PickHint::key) on
//                      a ring of the instance names, walking on past candidates loaded above
//                      (1 + slack) times the average: one prefix keeps reusing one P's cache
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "config/config.hpp"
#include "router/instances/instance.hpp"

namespace pdr::instances {

// What a policy may know of the request.
struct PickHint {
    std::size_t weight = 1;  // load the request adds to the instance chosen (>= 1)
    std::string_view key;    // prefix_affinity: the hashed prompt start (empty: no affinity)
};

class Policy {
public:
    virtual ~Policy() = default;
    virtual config::Policy kind() const noexcept = 0;
    // `all`: the role's instances in list order; `candidates`: indices into `all`, ascending,
    // not empty. Returns one of `candidates`.
    virtual std::size_t choose(const std::vector<InstancePtr>& all,
                               std::span<const std::size_t> candidates, const PickHint& hint) = 0;
};

// A random source for power_of_two (tests inject a sequence); empty: a seeded mt19937_64.
using RandomSource = std::function<std::uint64_t()>;

std::unique_ptr<Policy> make_policy(config::Policy kind, const config::Config& cfg,
                                    RandomSource random = {});

// The stable 64-bit hash of prefix_affinity (FNV-1a), so replicas agree on the ring.
std::uint64_t affinity_hash(std::string_view s) noexcept;

}  // namespace pdr::instances
