#include "router/instances/policy.hpp"

#include <algorithm>
#include <random>

namespace pdr::instances {

namespace {

// The first candidate at or after `cursor` in list order (cyclically) that `ok` accepts, or
// candidates.size() when none does.
template <typename Ok>
std::size_t next_from(std::span<const std::size_t> candidates, std::size_t cursor, Ok ok) {
    const auto at = std::lower_bound(candidates.begin(), candidates.end(), cursor);
    const auto start = static_cast<std::size_t>(at - candidates.begin());
    for (std::size_t i = 0; i < candidates.size(); ++i) {
        const std::size_t c = (start + i) % candidates.size();
        if (ok(candidates[c])) {
            return c;
        }
    }
    return candidates.size();
}

class RoundRobin final : public Policy {
public:
    config::Policy kind() const noexcept override { return config::Policy::RoundRobin; }
    std::size_t choose(const std::vector<InstancePtr>& all, std::span<const std::size_t> candidates,
                       const PickHint&) override {
        const std::size_t at =
            candidates[next_from(candidates, cursor_, [](std::size_t) { return true; })];
        cursor_ = (at + 1) % all.size();
        return at;
    }

private:
    std::size_t cursor_ = 0;
};

class LeastOutstanding final : public Policy {
public:
    config::Policy kind() const noexcept override { return config::Policy::LeastOutstanding; }
    std::size_t choose(const std::vector<InstancePtr>& all, std::span<const std::size_t> candidates,
                       const PickHint&) override {
        std::size_t least = all[candidates.front()]->load;
        for (std::size_t c : candidates) {
            least = std::min(least, all[c]->load);
        }
        const std::size_t at = candidates[next_from(
            candidates, cursor_, [&](std::size_t c) { return all[c]->load == least; })];
        cursor_ = (at + 1) % all.size();
        return at;
    }

private:
    std::size_t cursor_ = 0;  // ties go round robin
};

class PowerOfTwo final : public Policy {
public:
    explicit PowerOfTwo(RandomSource random) : random_(std::move(random)) {}
    config::Policy kind() const noexcept override { return config::Policy::PowerOfTwo; }
    std::size_t choose(const std::vector<InstancePtr>& all, std::span<const std::size_t> candidates,
                       const PickHint&) override {
        const std::size_t n = candidates.size();
        if (n == 1) {
            return candidates.front();
        }
        const std::size_t a = random_() % n;
        std::size_t b = random_() % (n - 1);
        if (b >= a) {
            ++b;  // two distinct candidates
        }
        const std::size_t ia = candidates[a], ib = candidates[b];
        return all[ib]->load < all[ia]->load ? ib : ia;
    }

private:
    RandomSource random_;
};

std::uint64_t mix(std::uint64_t x) noexcept {  // splitmix64's finalizer
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

// Rendezvous (highest random weight) hashing: each candidate scores hash(key, name) and the
// highest score wins, so taking an instance away moves only the keys it held. Bounded load
// (consistent hashing with bounded loads): a candidate is passed over while its in-flight
// count + 1 exceeds ceil((1 + slack) * (in flight in all candidates + 1) / candidates).
class PrefixAffinity final : public Policy {
public:
    explicit PrefixAffinity(int slack_pct) : slack_pct_(static_cast<std::size_t>(slack_pct)) {}
    config::Policy kind() const noexcept override { return config::Policy::PrefixAffinity; }
    std::size_t choose(const std::vector<InstancePtr>& all, std::span<const std::size_t> candidates,
                       const PickHint& hint) override {
        if (hint.key.empty()) {
            return fallback_.choose(all, candidates, hint);
        }
        const std::uint64_t key = affinity_hash(hint.key);
        std::size_t total = 0;
        for (std::size_t c : candidates) {
            total += all[c]->in_flight;
        }
        const std::size_t n = candidates.size();
        const std::size_t scaled = (100 + slack_pct_) * (total + 1);
        const std::size_t cap = (scaled + 100 * n - 1) / (100 * n);  // ceil(scaled / (100 n))
        std::size_t best = n;
        std::uint64_t best_score = 0;
        for (std::size_t i = 0; i < n; ++i) {
            const Instance& inst = *all[candidates[i]];
            if (inst.in_flight + 1 > cap) {
                continue;
            }
            const std::uint64_t score = mix(key ^ affinity_hash(inst.name));
            if (best == n || score > best_score) {
                best = i;
                best_score = score;
            }
        }
        if (best == n) {  // cannot happen (the least loaded is at most the average)
            return fallback_.choose(all, candidates, hint);
        }
        return candidates[best];
    }

private:
    std::size_t slack_pct_;
    LeastOutstanding fallback_;
};

}  // namespace

std::uint64_t affinity_hash(std::string_view s) noexcept {
    std::uint64_t h = 0xcbf29ce484222325ULL;
    for (char c : s) {
        h ^= static_cast<unsigned char>(c);
        h *= 0x100000001b3ULL;
    }
    return h;
}

std::unique_ptr<Policy> make_policy(config::Policy kind, const config::Config& cfg,
                                    RandomSource random) {
    switch (kind) {
        case config::Policy::RoundRobin:
            break;
        case config::Policy::LeastOutstanding:
            return std::make_unique<LeastOutstanding>();
        case config::Policy::PowerOfTwo:
            if (!random) {
                random = [rng = std::mt19937_64(std::random_device{}())]() mutable {
                    return rng();
                };
            }
            return std::make_unique<PowerOfTwo>(std::move(random));
        case config::Policy::PrefixAffinity:
            return std::make_unique<PrefixAffinity>(cfg.prefix_affinity_slack_pct);
    }
    return std::make_unique<RoundRobin>();
}

}  // namespace pdr::instances
