#include "router/metrics/metrics.hpp"

#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

namespace pdr::metrics {
namespace {

prometheus::Family<Counter>& counters(Registry& r, const std::string& name,
                                      const std::string& help = "H.") {
    return prometheus::BuildCounter().Name(name).Help(help).Register(r.families());
}

prometheus::Family<Gauge>& gauges(Registry& r, const std::string& name,
                                  const std::string& help = "H.") {
    return prometheus::BuildGauge().Name(name).Help(help).Register(r.families());
}

prometheus::Family<Histogram>& histograms(Registry& r, const std::string& name,
                                          const std::string& help = "H.") {
    return prometheus::BuildHistogram().Name(name).Help(help).Register(r.families());
}

TEST(MetricsText, CounterWithoutLabels) {
    Registry r;
    counters(r, "a_total", "Things that happened.").Add({}).Increment(3);
    EXPECT_EQ(r.render(),
              "# HELP a_total Things that happened.\n"
              "# TYPE a_total counter\n"
              "a_total 3\n");
}

TEST(MetricsText, LabelsSortedByNameAndSeriesByLabels) {
    Registry r;
    auto& g = gauges(r, "g", "A gauge.");
    g.Add({{"zone", "b"}, {"app", "y"}}).Set(2.5);
    g.Add({{"zone", "a"}, {"app", "x"}}).Set(-1);
    g.Add({{"zone", "b"}, {"app", "x"}}).Set(0.1);
    EXPECT_EQ(r.render(),
              "# HELP g A gauge.\n"
              "# TYPE g gauge\n"
              "g{app=\"x\",zone=\"a\"} -1\n"
              "g{app=\"x\",zone=\"b\"} 0.1\n"
              "g{app=\"y\",zone=\"b\"} 2.5\n");
}

TEST(MetricsText, SameLabelsAreOneSeries) {
    Registry r;
    auto& family = counters(r, "c_total");
    auto& a = family.Add({{"x", "1"}, {"y", "2"}});
    auto& b = family.Add({{"y", "2"}, {"x", "1"}});
    EXPECT_EQ(&a, &b);
    a.Increment();
    b.Increment(2);
    a.Increment(-5);  // a counter ignores negative increments
    EXPECT_EQ(r.render(),
              "# HELP c_total H.\n"
              "# TYPE c_total counter\n"
              "c_total{x=\"1\",y=\"2\"} 3\n");
}

TEST(MetricsText, EscapesLabelValues) {
    Registry r;
    counters(r, "e_total").Add({{"v", "a\"b\\c\nd"}}).Increment();
    EXPECT_NE(r.render().find("e_total{v=\"a\\\"b\\\\c\\nd\"} 1\n"), std::string::npos)
        << r.render();
}

TEST(MetricsText, FamiliesWithoutVisibleSeriesAreLeftOut) {
    Registry r;
    counters(r, "empty_total");
    gauges(r, "g").Add({}).Set(1);
    EXPECT_EQ(r.render(),
              "# HELP g H.\n"
              "# TYPE g gauge\n"
              "g 1\n");
}

TEST(MetricsText, CountersThenGaugesThenHistogramsInRegistrationOrder) {
    Registry r;
    histograms(r, "h_seconds").Add({}, Histogram::BucketBoundaries{1});
    gauges(r, "zz").Add({});
    counters(r, "b_total").Add({});
    counters(r, "a_total").Add({});
    std::string text = r.render();
    EXPECT_LT(text.find("# TYPE b_total"), text.find("# TYPE a_total"));
    EXPECT_LT(text.find("# TYPE a_total"), text.find("# TYPE zz"));
    EXPECT_LT(text.find("# TYPE zz"), text.find("# TYPE h_seconds"));
}

TEST(MetricsHistogram, BucketsAreCumulativeWithInf) {
    Registry r;
    auto& h = histograms(r, "lat_seconds", "Latency.")
                  .Add({{"route", "x"}}, Histogram::BucketBoundaries{0.1, 1, 10});
    for (double v : {0.0625, 0.09375, 1.0, 2.0, 20.0, 30.0}) {
        h.Observe(v);  // 1.0: le is <=
    }
    EXPECT_EQ(r.render(),
              "# HELP lat_seconds Latency.\n"
              "# TYPE lat_seconds histogram\n"
              "lat_seconds_count{route=\"x\"} 6\n"
              "lat_seconds_sum{route=\"x\"} 53.15625\n"
              "lat_seconds_bucket{route=\"x\",le=\"0.1\"} 2\n"
              "lat_seconds_bucket{route=\"x\",le=\"1\"} 3\n"
              "lat_seconds_bucket{route=\"x\",le=\"10\"} 4\n"
              "lat_seconds_bucket{route=\"x\",le=\"+Inf\"} 6\n");
}

TEST(MetricsHistogram, LatencyBuckets) {
    auto b = latency_buckets();
    EXPECT_EQ(b, (Histogram::BucketBoundaries{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                              0.25, 0.5, 1, 2.5, 5, 10, 15, 20, 30, 60}));
    Registry r;
    histograms(r, "l_seconds").Add({}, b);
    std::string text = r.render();
    for (const char* le : {"0.0005", "0.001", "0.0025", "0.025", "0.25", "2.5", "60", "+Inf"}) {
        EXPECT_NE(text.find(std::string("l_seconds_bucket{le=\"") + le + "\"} 0\n"),
                  std::string::npos)
            << le << "\n"
            << text;
    }
}

TEST(MetricsRegistry, HideKeepsTheSeriesAndShowBringsItBackWithItsValue) {
    Registry r;
    auto& up = gauges(r, "up", "Up.");
    auto& a = up.Add({{"instance", "a:1"}});
    auto& b = up.Add({{"instance", "b:1"}});
    a.Set(1);
    b.Set(1);
    r.hide(up, {{"instance", "a:1"}});
    a.Set(7);  // still valid after hide
    EXPECT_EQ(r.render(),
              "# HELP up Up.\n"
              "# TYPE up gauge\n"
              "up{instance=\"b:1\"} 1\n");
    r.hide(up, {{"instance", "nope:1"}});  // unknown: no-op
    r.show(up, {{"instance", "nope:2"}});  // unknown: no-op
    r.hide(up, {{"instance", "b:1"}});
    EXPECT_EQ(r.render(), "") << "a family with every series hidden is left out";
    r.show(up, {{"instance", "a:1"}});
    EXPECT_EQ(&up.Add({{"instance", "a:1"}}), &a);
    EXPECT_EQ(r.render(),
              "# HELP up Up.\n"
              "# TYPE up gauge\n"
              "up{instance=\"a:1\"} 7\n");
}

TEST(MetricsRegistry, HidingIsPerFamily) {
    Registry r;
    auto& x = gauges(r, "x");
    auto& y = gauges(r, "y");
    x.Add({{"i", "1"}}).Set(1);
    y.Add({{"i", "1"}}).Set(2);
    r.hide(x, {{"i", "1"}});
    EXPECT_EQ(r.render(),
              "# HELP y H.\n"
              "# TYPE y gauge\n"
              "y{i=\"1\"} 2\n");
}

TEST(MetricsConcurrency, ParallelUpdatesHidingAndRenderingAreExact) {
    Registry r;
    auto& c = counters(r, "hits_total").Add({});
    auto& h = histograms(r, "obs_seconds").Add({}, Histogram::BucketBoundaries{0.5});
    auto& per_thread = gauges(r, "per_thread");
    constexpr int kThreads = 4;
    constexpr int kIters = 20000;
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
        threads.emplace_back([&, t] {
            const Labels mine{{"t", std::to_string(t)}};
            for (int i = 0; i < kIters; ++i) {
                c.Increment();
                h.Observe(i % 2 == 0 ? 0.25 : 1.0);
                if (i % 1000 == 0) {
                    per_thread.Add(mine).Increment();
                    r.hide(per_thread, mine);
                    (void)r.render();
                    r.show(per_thread, mine);
                }
            }
        });
    }
    for (auto& th : threads) {
        th.join();
    }
    const std::string text = r.render();
    const std::string n = std::to_string(kThreads * kIters);
    EXPECT_NE(text.find("hits_total " + n + "\n"), std::string::npos) << text;
    EXPECT_NE(text.find("obs_seconds_count " + n + "\n"), std::string::npos) << text;
    EXPECT_NE(
        text.find("obs_seconds_bucket{le=\"0.5\"} " + std::to_string(kThreads * kIters / 2) + "\n"),
        std::string::npos)
        << text;
    EXPECT_NE(
        text.find("obs_seconds_sum " + std::to_string(kThreads * (kIters / 2) * 5 / 4) + "\n"),
        std::string::npos)
        << text;
    for (int t = 0; t < kThreads; ++t) {
        EXPECT_NE(text.find("per_thread{t=\"" + std::to_string(t) + "\"} " +
                            std::to_string(kIters / 1000) + "\n"),
                  std::string::npos)
            << text;
    }
}

}  // namespace
}  // namespace pdr::metrics
