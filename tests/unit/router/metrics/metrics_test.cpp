#include "router/metrics/metrics.hpp"

#include <gtest/gtest.h>

#include <limits>
#include <stdexcept>
#include <thread>
#include <vector>

namespace pdr::metrics {
namespace {

TEST(MetricsText, CounterWithoutLabels) {
    Registry r;
    r.counter("a_total", "Things that happened.").inc(3);
    EXPECT_EQ(r.render(),
              "# HELP a_total Things that happened.\n"
              "# TYPE a_total counter\n"
              "a_total 3\n");
}

TEST(MetricsText, GaugeWithLabelsSortedByName) {
    Registry r;
    auto& g = r.gauge("g", "A gauge.", {{"zone", "b"}, {"app", "x"}});
    g.set(2.5);
    g.inc();
    g.dec(0.25);
    EXPECT_DOUBLE_EQ(g.value(), 3.25);
    EXPECT_EQ(r.render(),
              "# HELP g A gauge.\n"
              "# TYPE g gauge\n"
              "g{app=\"x\",zone=\"b\"} 3.25\n");
}

TEST(MetricsText, SameLabelsInAnyOrderAreOneSeries) {
    Registry r;
    auto& a = r.counter("c_total", "h", {{"x", "1"}, {"y", "2"}});
    auto& b = r.counter("c_total", "other help is ignored", {{"y", "2"}, {"x", "1"}});
    EXPECT_EQ(&a, &b);
    auto& c = r.counter("c_total", "h", {{"x", "1"}, {"y", "3"}});
    EXPECT_NE(&a, &c);
    a.inc();
    c.inc(2);
    EXPECT_EQ(r.render(),
              "# HELP c_total h\n"
              "# TYPE c_total counter\n"
              "c_total{x=\"1\",y=\"2\"} 1\n"
              "c_total{x=\"1\",y=\"3\"} 2\n");
}

TEST(MetricsText, EscapesLabelValuesAndHelp) {
    Registry r;
    r.counter("e_total", "back\\slash and\nnewline", {{"v", "a\"b\\c\nd"}}).inc();
    EXPECT_EQ(r.render(),
              "# HELP e_total back\\\\slash and\\nnewline\n"
              "# TYPE e_total counter\n"
              "e_total{v=\"a\\\"b\\\\c\\nd\"} 1\n");
    EXPECT_EQ(escape_label_value("plain"), "plain");
    EXPECT_EQ(escape_help("say \"hi\""), "say \"hi\"");  // quotes stay as-is in HELP
}

TEST(MetricsText, FormatsSpecialValues) {
    EXPECT_EQ(format_value(0), "0");
    EXPECT_EQ(format_value(0.1), "0.1");
    EXPECT_EQ(format_value(-2), "-2");
    EXPECT_EQ(format_value(1e21), "1e+21");
    EXPECT_EQ(format_value(std::numeric_limits<double>::infinity()), "+Inf");
    EXPECT_EQ(format_value(-std::numeric_limits<double>::infinity()), "-Inf");
    EXPECT_EQ(format_value(std::numeric_limits<double>::quiet_NaN()), "NaN");
}

TEST(MetricsHistogram, BucketsAreCumulativeWithInf) {
    Registry r;
    auto& h = r.histogram("lat_seconds", "Latency.", {{"route", "x"}}, {0.1, 1, 10});
    for (double v : {0.0625, 0.09375, 1.0, 2.0, 20.0, 30.0}) {
        h.observe(v);  // 1.0: le is <=
    }
    EXPECT_EQ(h.count(), 6u);
    EXPECT_DOUBLE_EQ(h.sum(), 53.15625);
    EXPECT_EQ(h.cumulative_counts(), (std::vector<std::uint64_t>{2, 3, 4, 6}));
    EXPECT_EQ(r.render(),
              "# HELP lat_seconds Latency.\n"
              "# TYPE lat_seconds histogram\n"
              "lat_seconds_bucket{route=\"x\",le=\"0.1\"} 2\n"
              "lat_seconds_bucket{route=\"x\",le=\"1\"} 3\n"
              "lat_seconds_bucket{route=\"x\",le=\"10\"} 4\n"
              "lat_seconds_bucket{route=\"x\",le=\"+Inf\"} 6\n"
              "lat_seconds_sum{route=\"x\"} 53.15625\n"
              "lat_seconds_count{route=\"x\"} 6\n");
}

TEST(MetricsHistogram, NoLabelsAndNanIgnored) {
    Registry r;
    auto& h = r.histogram("h", "H.", {}, {1});
    h.observe(std::numeric_limits<double>::quiet_NaN());
    h.observe(1);
    EXPECT_EQ(r.render(),
              "# HELP h H.\n"
              "# TYPE h histogram\n"
              "h_bucket{le=\"1\"} 1\n"
              "h_bucket{le=\"+Inf\"} 1\n"
              "h_sum 1\n"
              "h_count 1\n");
}

TEST(MetricsHistogram, LatencyBuckets) {
    auto b = latency_buckets();
    ASSERT_GE(b.size(), 16u);
    EXPECT_DOUBLE_EQ(b.front(), 0.0005);
    EXPECT_DOUBLE_EQ(b.back(), 60);
    for (std::size_t i = 1; i < b.size(); ++i) {
        EXPECT_LT(b[i - 1], b[i]);
    }
}

TEST(MetricsCounter, IgnoresNegativeAndNan) {
    Counter c;
    c.inc(2);
    c.inc(-1);
    c.inc(std::numeric_limits<double>::quiet_NaN());
    EXPECT_DOUBLE_EQ(c.value(), 2);
}

TEST(MetricsRegistry, RemoveHidesAndReviveKeepsValue) {
    Registry r;
    auto& a = r.gauge("up", "Up.", {{"instance", "a:1"}});
    auto& b = r.gauge("up", "Up.", {{"instance", "b:1"}});
    a.set(1);
    b.set(1);
    r.remove("up", {{"instance", "a:1"}});
    a.set(0);  // still valid memory after remove
    EXPECT_EQ(r.render(),
              "# HELP up Up.\n"
              "# TYPE up gauge\n"
              "up{instance=\"b:1\"} 1\n");
    r.remove("nope", {});                  // unknown: no-op
    r.remove("up", {{"bad name!", "x"}});  // invalid: no-op
    auto& again = r.gauge("up", "Up.", {{"instance", "a:1"}});
    EXPECT_EQ(&again, &a);
    EXPECT_NE(r.render().find("up{instance=\"a:1\"} 0\n"), std::string::npos);
}

TEST(MetricsRegistry, FamiliesRenderInCreationOrder) {
    Registry r;
    r.gauge("zz", "Z.");
    r.counter("aa_total", "A.");
    std::string text = r.render();
    EXPECT_LT(text.find("# HELP zz"), text.find("# HELP aa_total"));
}

TEST(MetricsRegistry, RejectsInvalidNamesAndTypeClashes) {
    Registry r;
    EXPECT_THROW(r.counter("", "h"), std::invalid_argument);
    EXPECT_THROW(r.counter("1abc", "h"), std::invalid_argument);
    EXPECT_THROW(r.counter("a-b", "h"), std::invalid_argument);
    EXPECT_THROW(r.counter("ok_total", "h", {{"bad-label", "v"}}), std::invalid_argument);
    EXPECT_THROW(r.counter("ok_total", "h", {{"__reserved", "v"}}), std::invalid_argument);
    EXPECT_THROW(r.counter("ok_total", "h", {{"a", "1"}, {"a", "2"}}), std::invalid_argument);
    EXPECT_THROW(r.histogram("h_seconds", "h", {{"le", "1"}}), std::invalid_argument);
    EXPECT_THROW(r.histogram("h2_seconds", "h", {}, {1, 1}), std::invalid_argument);
    EXPECT_THROW(r.histogram("h3_seconds", "h", {}, {2, 1}), std::invalid_argument);
    r.counter("x_total", "h");
    EXPECT_THROW(r.gauge("x_total", "h"), std::logic_error);
    r.histogram("y_seconds", "h", {}, {1, 2});
    EXPECT_THROW(r.histogram("y_seconds", "h", {{"a", "b"}}, {1, 3}), std::logic_error);
    EXPECT_NO_THROW(r.counter("ns:colon_total", "h"));
}

TEST(MetricsGaugeGuard, IncrementsAndDecrements) {
    Gauge g;
    {
        GaugeGuard a(g);
        EXPECT_DOUBLE_EQ(g.value(), 1);
        GaugeGuard b(std::move(a));
        EXPECT_DOUBLE_EQ(g.value(), 1);
    }
    EXPECT_DOUBLE_EQ(g.value(), 0);
}

TEST(MetricsConcurrency, ParallelUpdatesAndCreationAreExact) {
    Registry r;
    auto& c = r.counter("hits_total", "Hits.");
    auto& h = r.histogram("obs_seconds", "Obs.", {}, {0.5});
    constexpr int kThreads = 4;
    constexpr int kIters = 20000;
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
        threads.emplace_back([&, t] {
            for (int i = 0; i < kIters; ++i) {
                c.inc();
                h.observe(i % 2 == 0 ? 0.25 : 1.0);
                if (i % 1000 == 0) {
                    r.gauge("per_thread", "G.", {{"t", std::to_string(t)}}).inc();
                    (void)r.render();
                }
            }
        });
    }
    for (auto& th : threads) {
        th.join();
    }
    EXPECT_DOUBLE_EQ(c.value(), kThreads * kIters);
    EXPECT_EQ(h.count(), static_cast<std::uint64_t>(kThreads * kIters));
    EXPECT_EQ(h.cumulative_counts().front(), static_cast<std::uint64_t>(kThreads * kIters / 2));
    EXPECT_DOUBLE_EQ(h.sum(), kThreads * (kIters / 2) * 1.25);
    for (int t = 0; t < kThreads; ++t) {
        EXPECT_DOUBLE_EQ(r.gauge("per_thread", "G.", {{"t", std::to_string(t)}}).value(),
                         kIters / 1000);
    }
}

}  // namespace
}  // namespace pdr::metrics
