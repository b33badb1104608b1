#include "router/metrics/metrics.hpp"

#include <prometheus/client_metric.h>
#include <prometheus/metric_family.h>
#include <prometheus/text_serializer.h>

#include <algorithm>

namespace pdr::metrics {

Histogram::BucketBoundaries latency_buckets() {
    return {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
            0.5,    1,     2.5,    5,     10,   15,    20,   30,  60};
}

namespace {

Labels labels_of(const prometheus::ClientMetric& m) {
    Labels out;
    for (const auto& l : m.label) {
        out.emplace(l.name, l.value);
    }
    return out;
}

}  // namespace

void Registry::set_hidden(const std::string& family, const Labels& labels, bool hidden) {
    std::lock_guard lock(hidden_mutex_);
    if (hidden) {
        hidden_[family].insert(labels);
        return;
    }
    auto it = hidden_.find(family);
    if (it == hidden_.end()) {
        return;
    }
    it->second.erase(labels);
    if (it->second.empty()) {
        hidden_.erase(it);
    }
}

std::string Registry::render() const {
    std::vector<prometheus::MetricFamily> collected = families_.Collect();
    {
        std::lock_guard lock(hidden_mutex_);
        for (auto& family : collected) {
            auto it = hidden_.find(family.name);
            if (it == hidden_.end()) {
                continue;
            }
            const std::set<Labels>& hidden = it->second;
            std::erase_if(family.metric, [&hidden](const prometheus::ClientMetric& m) {
                return hidden.contains(labels_of(m));
            });
        }
    }
    std::erase_if(collected, [](const prometheus::MetricFamily& f) { return f.metric.empty(); });
    // prometheus-cpp keeps a family's series in a hash map; sort them so the text is stable.
    for (auto& family : collected) {
        std::sort(family.metric.begin(), family.metric.end(),
                  [](const prometheus::ClientMetric& a, const prometheus::ClientMetric& b) {
                      return a.label < b.label;
                  });
    }
    return prometheus::TextSerializer().Serialize(collected);
}

}  // namespace pdr::metrics
