#pragma once
// Reads one counter or gauge series straight from a metrics::Registry (hidden or not), for
// unit tests that check what the router counted without parsing the exposition.
#include <prometheus/metric_family.h>

#include <optional>
#include <string>

#include "router/metrics/metrics.hpp"

namespace pdr::metrics {

inline std::optional<double> series_value(Registry& r, const std::string& name,
                                          const Labels& labels = {}) {
    for (const prometheus::MetricFamily& family : r.families().Collect()) {
        if (family.name != name) {
            continue;
        }
        for (const prometheus::ClientMetric& m : family.metric) {
            Labels have;
            for (const auto& l : m.label) {
                have.emplace(l.name, l.value);
            }
            if (have == labels) {
                return family.type == prometheus::MetricType::Counter ? m.counter.value
                                                                      : m.gauge.value;
            }
        }
    }
    return std::nullopt;
}

}  // namespace pdr::metrics
