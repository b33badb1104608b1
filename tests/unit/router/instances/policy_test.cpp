// Selection policies against small models of what each must choose, on random loads and
// random candidate sets (fixed seeds), and through the Registry (filtering, metric, load).
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "router/instances/policy.hpp"
#include "tests/unit/router/instances/fixture.hpp"

namespace pdr::instances {
namespace {

std::vector<InstancePtr> make_instances(std::size_t n) {
    std::vector<InstancePtr> all;
    for (std::size_t i = 0; i < n; ++i) {
        auto inst = std::make_shared<Instance>();
        inst->name = "10.0.0." + std::to_string(i + 1) + ":8000";
        all.push_back(inst);
    }
    return all;
}

// A random non-empty ascending subset of 0..n-1.
std::vector<std::size_t> random_candidates(std::mt19937& rng, std::size_t n) {
    std::vector<std::size_t> c;
    while (c.empty()) {
        for (std::size_t i = 0; i < n; ++i) {
            if (rng() % 3 != 0) {
                c.push_back(i);
            }
        }
    }
    return c;
}

// Model of the cyclic rule: the first candidate after `last` in list order that `ok` accepts,
// else the first one `ok` accepts.
template <typename Ok>
std::size_t model_after(const std::vector<std::size_t>& c, std::size_t last, bool any, Ok ok) {
    for (std::size_t i : c) {
        if ((!any || i > last) && ok(i)) {
            return i;
        }
    }
    for (std::size_t i : c) {
        if (ok(i)) {
            return i;
        }
    }
    return c.size();
}

TEST(PolicyTest, RoundRobinMatchesModel) {
    config::Config cfg;
    auto policy = make_policy(config::Policy::RoundRobin, cfg);
    EXPECT_EQ(policy->kind(), config::Policy::RoundRobin);
    std::mt19937 rng(1);
    auto all = make_instances(5);
    std::size_t last = 0;
    bool any = false;
    for (int step = 0; step < 500; ++step) {
        const auto c = random_candidates(rng, all.size());
        const std::size_t want = model_after(c, last, any, [](std::size_t) { return true; });
        const std::size_t got = policy->choose(all, c, {});
        ASSERT_EQ(got, want) << "step " << step;
        last = got;
        any = true;
    }
}

TEST(PolicyTest, LeastOutstandingMatchesModel) {
    config::Config cfg;
    auto policy = make_policy(config::Policy::LeastOutstanding, cfg);
    std::mt19937 rng(2);
    auto all = make_instances(6);
    std::size_t last = 0;
    bool any = false;
    for (int step = 0; step < 500; ++step) {
        for (auto& inst : all) {
            inst->load = rng() % 4;  // many ties: they must rotate
        }
        const auto c = random_candidates(rng, all.size());
        std::size_t least = all[c.front()]->load;
        for (std::size_t i : c) {
            least = std::min(least, all[i]->load);
        }
        const std::size_t want =
            model_after(c, last, any, [&](std::size_t i) { return all[i]->load == least; });
        const std::size_t got = policy->choose(all, c, {});
        ASSERT_EQ(got, want) << "step " << step;
        last = got;
        any = true;
    }
}

TEST(PolicyTest, PowerOfTwoMatchesModel) {
    config::Config cfg;
    std::mt19937_64 source(3);
    std::vector<std::uint64_t> drawn;
    auto policy = make_policy(config::Policy::PowerOfTwo, cfg, [&] {
        drawn.push_back(source());
        return drawn.back();
    });
    std::mt19937 rng(4);
    auto all = make_instances(5);
    int never_max_checked = 0;
    for (int step = 0; step < 1000; ++step) {
        for (auto& inst : all) {
            inst->load = rng() % 10;
        }
        const auto c = random_candidates(rng, all.size());
        drawn.clear();
        const std::size_t got = policy->choose(all, c, {});
        if (c.size() == 1) {
            ASSERT_EQ(got, c.front());
            continue;
        }
        ASSERT_EQ(drawn.size(), 2u);
        const std::size_t a = drawn[0] % c.size();
        std::size_t b = drawn[1] % (c.size() - 1);
        b += b >= a ? 1 : 0;
        const std::size_t want = all[c[b]]->load < all[c[a]]->load ? c[b] : c[a];
        ASSERT_EQ(got, want) << "step " << step;
        // The one most loaded candidate is never chosen.
        std::size_t most = c.front(), ties = 0;
        for (std::size_t i : c) {
            if (all[i]->load > all[most]->load) {
                most = i;
            }
        }
        for (std::size_t i : c) {
            ties += all[i]->load == all[most]->load ? 1 : 0;
        }
        if (ties == 1) {
            ASSERT_NE(got, most);
            ++never_max_checked;
        }
    }
    EXPECT_GT(never_max_checked, 100);
}

TEST(PolicyTest, PrefixAffinityIsStickyAndSpreadsKeys) {
    config::Config cfg;
    auto policy = make_policy(config::Policy::PrefixAffinity, cfg);
    auto all = make_instances(4);
    const std::vector<std::size_t> c = {0, 1, 2, 3};
    std::map<std::size_t, int> per_instance;
    std::map<std::string, std::size_t> home;
    for (int k = 0; k < 2000; ++k) {
        const std::string key = "You are a helpful assistant #" + std::to_string(k);
        const std::size_t got = policy->choose(all, c, {1, key});
        EXPECT_EQ(policy->choose(all, c, {1, key}), got);  // idle: always the same home
        home[key] = got;
        ++per_instance[got];
    }
    for (std::size_t i = 0; i < all.size(); ++i) {
        EXPECT_GT(per_instance[i], 350) << "instance " << i;  // 500 each when even
        EXPECT_LT(per_instance[i], 650) << "instance " << i;
    }
    // Taking instance 2 away moves only the keys it held.
    const std::vector<std::size_t> without2 = {0, 1, 3};
    int moved = 0;
    for (const auto& [key, was] : home) {
        const std::size_t now = policy->choose(all, without2, {1, key});
        if (was != 2) {
            ASSERT_EQ(now, was) << key;
        } else {
            ++moved;
        }
    }
    EXPECT_EQ(moved, per_instance[2]);
}

TEST(PolicyTest, PrefixAffinityBoundsLoadAsModelled) {
    config::Config cfg;
    cfg.prefix_affinity_slack_pct = 25;
    auto policy = make_policy(config::Policy::PrefixAffinity, cfg);
    std::mt19937 rng(5);
    auto all = make_instances(5);
    int left_home = 0;
    for (int step = 0; step < 2000; ++step) {
        const auto c = random_candidates(rng, all.size());
        const std::string key = "prefix " + std::to_string(step % 50);
        for (auto& inst : all) {
            inst->in_flight = 0;
        }
        const std::size_t idle_home = policy->choose(all, c, {1, key});
        std::size_t total = 0;
        for (auto& inst : all) {
            inst->in_flight = rng() % 6;
        }
        for (std::size_t i : c) {
            total += all[i]->in_flight;
        }
        // Model: capacity ceil(1.25 * (total + 1) / n); the home unless it is full.
        const double cap =
            std::ceil(1.25 * static_cast<double>(total + 1) / static_cast<double>(c.size()));
        const std::size_t got = policy->choose(all, c, {1, key});
        ASSERT_LE(static_cast<double>(all[got]->in_flight + 1), cap) << "step " << step;
        if (static_cast<double>(all[idle_home]->in_flight + 1) <= cap) {
            ASSERT_EQ(got, idle_home) << "step " << step;
        } else {
            ++left_home;
        }
    }
    EXPECT_GT(left_home, 50);  // the bound did act
}

TEST(PolicyTest, PrefixAffinityWithoutKeyIsLeastOutstanding) {
    config::Config cfg;
    auto policy = make_policy(config::Policy::PrefixAffinity, cfg);
    auto all = make_instances(3);
    all[0]->load = 5;
    all[1]->load = 1;
    all[2]->load = 3;
    EXPECT_EQ(policy->choose(all, std::vector<std::size_t>{0, 1, 2}, {}), 1u);
}

// Through the Registry: every policy skips down, removed, excluded and unusable instances,
// counts its picks, and an InFlight's weight is the load the policies see until it ends.
TEST_F(RegistryTest, EveryPolicySkipsInstancesThatMayNotBePicked) {
    for (auto kind : {config::Policy::RoundRobin, config::Policy::LeastOutstanding,
                      config::Policy::PowerOfTwo, config::Policy::PrefixAffinity}) {
        cfg.prefill_policy = kind;
        registry.reset();
        reg().add_configured(Role::Prefill, addr("127.0.0.1", 8001));
        reg().add_configured(Role::Prefill, addr("127.0.0.1", 8002));
        reg().add_configured(Role::Prefill, addr("127.0.0.1", 8003));
        reg().add_configured(Role::Prefill, addr("127.0.0.1", 8004));
        reg().report_failure(*reg().find(Role::Prefill, "127.0.0.1:8001"), "down");
        // Removed, with a request still in flight (so it is not yet pruned).
        InFlight draining = reg().acquire(reg().find(Role::Prefill, "127.0.0.1:8002"));
        ASSERT_EQ(reg().remove("prefill", "127.0.0.1:8002").status, 200u);
        auto excluded = reg().find(Role::Prefill, "127.0.0.1:8003");
        static auto only_8003_or_8004 = +[](const Instance& i) { return i.endpoint.port != 8005; };
        reg().add_configured(Role::Prefill, addr("127.0.0.1", 8005));  // not usable
        const double before =
            metrics::series_value(mreg, "pdrouter_policy_picks_total",
                                  {{"role", "prefill"}, {"policy", std::string(to_string(kind))}})
                .value_or(0);
        for (int i = 0; i < 20; ++i) {
            const std::string key = "k" + std::to_string(i);
            auto got = reg().pick(Role::Prefill, excluded.get(), only_8003_or_8004, {1, key});
            ASSERT_TRUE(got) << to_string(kind);
            EXPECT_EQ(got->name, "127.0.0.1:8004") << to_string(kind);
        }
        const double after =
            metrics::series_value(mreg, "pdrouter_policy_picks_total",
                                  {{"role", "prefill"}, {"policy", std::string(to_string(kind))}})
                .value_or(0);
        EXPECT_EQ(after - before, 20) << to_string(kind);
        EXPECT_EQ(reg().pick(Role::Prefill, reg().find(Role::Prefill, "127.0.0.1:8004").get(),
                             only_8003_or_8004),
                  reg().find(Role::Prefill, "127.0.0.1:8003"));
    }
}

TEST_F(RegistryTest, LeastOutstandingFollowsWeightedInFlight) {
    cfg.prefill_policy = config::Policy::LeastOutstanding;
    reg().add_configured(Role::Prefill, addr("127.0.0.1", 8001));
    reg().add_configured(Role::Prefill, addr("127.0.0.1", 8002));
    auto a = reg().find(Role::Prefill, "127.0.0.1:8001");
    auto b = reg().find(Role::Prefill, "127.0.0.1:8002");
    {
        InFlight long_prompt = reg().acquire(a, 5000);
        InFlight short1 = reg().acquire(b, 10);
        InFlight short2 = reg().acquire(b, 10);
        EXPECT_EQ(a->load, 5000u);
        EXPECT_EQ(b->load, 20u);
        // Two requests on b, one on a: b still has less prompt to prefill.
        EXPECT_EQ(reg().pick(Role::Prefill), b);
        short1.release();
        short1.release();  // idempotent
        EXPECT_EQ(b->load, 10u);
    }
    EXPECT_EQ(a->load, 0u);
    EXPECT_EQ(b->load, 0u);
    EXPECT_EQ(a->in_flight, 0u);
}

}  // namespace
}  // namespace pdr::instances
