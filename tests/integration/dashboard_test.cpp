// The Grafana dashboard (docs/grafana/pdrouter.json, shipped by the Helm chart) asks only for
// metrics a live pdrouter serves: every pdrouter_* name in its queries is in /metrics.
#include <gtest/gtest.h>

#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include "tests/support/fixture.hpp"

namespace pdr::test {
namespace {

using nlohmann::json;

void collect_exprs(const json& j, std::vector<std::string>& out) {
    if (j.is_object()) {
        for (const auto& [key, value] : j.items()) {
            if (key == "expr" && value.is_string()) {
                out.push_back(value.get<std::string>());
            } else {
                collect_exprs(value, out);
            }
        }
    } else if (j.is_array()) {
        for (const auto& v : j) {
            collect_exprs(v, out);
        }
    }
}

// Every pdrouter_* name the dashboard's queries use (histograms as their _bucket series).
std::set<std::string> dashboard_names() {
    std::ifstream in(std::string(PDR_TEST_SOURCE_DIR) + "/docs/grafana/pdrouter.json");
    EXPECT_TRUE(in) << "docs/grafana/pdrouter.json not found";
    const json dashboard = json::parse(in);
    std::vector<std::string> exprs;
    collect_exprs(dashboard, exprs);
    std::set<std::string> names;
    const std::regex name_re("pdrouter_[a-z0-9_]+");
    for (const auto& e : exprs) {
        for (std::sregex_iterator it(e.begin(), e.end(), name_re), end; it != end; ++it) {
            names.insert(it->str());
        }
    }
    return names;
}

// The names /metrics shows: families (# TYPE lines) and samples (with _bucket, _sum, _count).
std::set<std::string> served_names(const std::string& text) {
    std::set<std::string> names;
    std::istringstream lines(text);
    std::string line;
    while (std::getline(lines, line)) {
        if (line.starts_with("# TYPE ")) {
            names.insert(line.substr(7, line.find(' ', 7) - 7));
        } else if (!line.empty() && line[0] != '#') {
            names.insert(line.substr(0, line.find_first_of("{ ")));
        }
    }
    return names;
}

bool is_kv_ready(const std::string& name) {
    return name.starts_with("pdrouter_kv_ready_");
}

class DashboardTest : public ClusterTest {};

TEST_F(DashboardTest, EveryMetricTheDashboardUsesIsServed) {
    const auto names = dashboard_names();
    ASSERT_GE(names.size(), 20u) << "the dashboard's queries were not found";
    PdCluster& pd = start(PdOptions{});
    // Families that appear on first use: one answered request and one refused request.
    auto ok = http_post_json(pd.router->port, "/v1/completions", completion_body("hi", 2, false));
    EXPECT_EQ(ok.status, 200) << ok.describe();
    auto bad = http_post(pd.router->port, "/v1/completions", "{not json", {});
    EXPECT_EQ(bad.status, 400) << bad.describe();

    const auto served = served_names(metrics_text(*pd.router));
    for (const auto& name : names) {
        if (!is_kv_ready(name)) {
            EXPECT_TRUE(served.contains(name))
                << name << " is used by the dashboard but not served";
        }
    }
}

// The LMCache mode's names, checked against a router in that mode when this build has it.
TEST_F(DashboardTest, KvReadyMetricsTheDashboardUsesAreServedInLmcacheMode) {
    std::set<std::string> kv_ready;
    for (const auto& name : dashboard_names()) {
        if (is_kv_ready(name)) {
            kv_ready.insert(name);
        }
    }
    ASSERT_FALSE(kv_ready.empty()) << "the dashboard has no KV-ready panel";
    const std::vector<std::string> lmcache = {"--kv-mode", "lmcache", "--kv-ready-bind",
                                              "tcp://127.0.0.1:*"};
    std::vector<std::string> probe = lmcache;
    probe.insert(probe.end(),
                 {"--prefill", "127.0.0.1:8100", "--decode", "127.0.0.1:8200", "--check-config"});
    auto r = run_to_exit(pdrouter_path(), probe, Ms{5000});
    if (r.status.code != 0) {
        std::string list;
        for (const auto& n : kv_ready) {
            list += " " + n;
        }
        const std::string why = r.err.substr(0, r.err.find('\n'));
        GTEST_SKIP() << "this pdrouter has no --kv-mode lmcache (" << why
                     << "); not checked:" << list;
    }
    PdCluster& pd = start(PdOptions{}.router(lmcache));
    const auto served = served_names(metrics_text(*pd.router));
    for (const auto& name : kv_ready) {
        EXPECT_TRUE(served.contains(name)) << name << " is used by the dashboard but not served";
    }
}

}  // namespace
}  // namespace pdr::test
