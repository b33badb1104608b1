#pragma once
// The metrics registry: prometheus-cpp's core library (families, counters, gauges, histograms)
// and its TextSerializer for the Prometheus text format 0.0.4, plus one thing it lacks: hiding a
// series without destroying it. Build families on families() once, Add() each labelled series
// once (at start-up or when an instance appears) and keep the reference: it stays valid for the
// Registry's lifetime, because series are hidden, never removed. Updates are lock-free atomics
// (a histogram takes its own mutex); Add(), hide/show and render() take mutexes.
#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/labels.h>
#include <prometheus/registry.h>

#include <map>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace pdr::metrics {

using Counter = prometheus::Counter;
using Gauge = prometheus::Gauge;
using Histogram = prometheus::Histogram;
using Labels = prometheus::Labels;  // name -> value, sorted by name

// Seconds, 0.5 ms .. 60 s (18 bounds).
Histogram::BucketBoundaries latency_buckets();

class Registry {
public:
    Registry() = default;
    Registry(const Registry&) = delete;
    Registry& operator=(const Registry&) = delete;

    // Where families are built: prometheus::BuildCounter().Name(..).Help(..).Register(families()).
    prometheus::Registry& families() noexcept { return families_; }

    // hide(): render() leaves out the series of `family` with exactly `labels`; the series keeps
    // its value and stays valid for updates. show() undoes it. Unknown series: no-op.
    template <class T>
    void hide(const prometheus::Family<T>& family, const Labels& labels) {
        set_hidden(family.GetName(), labels, true);
    }
    template <class T>
    void show(const prometheus::Family<T>& family, const Labels& labels) {
        set_hidden(family.GetName(), labels, false);
    }

    // Every family with at least one visible series, in text format 0.0.4: counters, gauges, then
    // histograms, each in registration order, its series sorted by labels.
    std::string render() const;

    static constexpr std::string_view kContentType = "text/plain; version=0.0.4; charset=utf-8";

private:
    void set_hidden(const std::string& family, const Labels& labels, bool hidden);

    prometheus::Registry families_;
    mutable std::mutex hidden_mutex_;
    std::map<std::string, std::set<Labels>, std::less<>> hidden_;  // family name -> series
};

}  // namespace pdr::metrics
