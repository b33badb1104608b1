#pragma once
// Counters, gauges and histograms rendered in the Prometheus text exposition format 0.0.4.
// Updates are lock-free (relaxed atomics); the registry's mutex is taken only when a series is
// created, removed or rendered. Look a series up once (at start-up or when an instance appears)
// and keep the reference: references stay valid for the Registry's lifetime, even after remove().
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace pdr::metrics {

// Label name/value pairs. Order does not matter: series are identified by their sorted labels.
using Labels = std::vector<std::pair<std::string, std::string>>;

class Counter {
public:
    void inc(double v = 1) noexcept;  // negative or NaN increments are ignored
    double value() const noexcept { return value_.load(std::memory_order_relaxed); }

private:
    std::atomic<double> value_{0};
};

class Gauge {
public:
    void set(double v) noexcept { value_.store(v, std::memory_order_relaxed); }
    void inc(double v = 1) noexcept { value_.fetch_add(v, std::memory_order_relaxed); }
    void dec(double v = 1) noexcept { value_.fetch_sub(v, std::memory_order_relaxed); }
    double value() const noexcept { return value_.load(std::memory_order_relaxed); }

private:
    std::atomic<double> value_{0};
};

class Histogram {
public:
    // `bounds`: finite upper bounds, strictly increasing (checked by the Registry).
    explicit Histogram(std::vector<double> bounds);

    void observe(double v) noexcept;  // NaN is ignored
    std::uint64_t count() const noexcept;
    double sum() const noexcept { return sum_.load(std::memory_order_relaxed); }
    const std::vector<double>& bounds() const noexcept { return bounds_; }
    // Cumulative counts, one per bound plus the final +Inf bucket (== count()).
    std::vector<std::uint64_t> cumulative_counts() const;

private:
    std::vector<double> bounds_;
    std::unique_ptr<std::atomic<std::uint64_t>[]> buckets_;  // bounds_.size() + 1, not cumulative
    std::atomic<double> sum_{0};
};

// Increments a gauge now and decrements it when destroyed (e.g. requests in flight).
class GaugeGuard {
public:
    explicit GaugeGuard(Gauge& g) noexcept : gauge_(&g) { g.inc(); }
    GaugeGuard(GaugeGuard&& o) noexcept : gauge_(std::exchange(o.gauge_, nullptr)) {}
    GaugeGuard(const GaugeGuard&) = delete;
    GaugeGuard& operator=(const GaugeGuard&) = delete;
    GaugeGuard& operator=(GaugeGuard&&) = delete;
    ~GaugeGuard() {
        if (gauge_ != nullptr) {
            gauge_->dec();
        }
    }

private:
    Gauge* gauge_;
};

// Seconds, 0.5 ms .. 60 s (18 bounds).
std::vector<double> latency_buckets();

class Registry {
public:
    Registry();
    ~Registry();
    Registry(const Registry&) = delete;
    Registry& operator=(const Registry&) = delete;

    // Get-or-create. Throws std::invalid_argument for an invalid metric/label name or bucket list,
    // std::logic_error when `name` already exists with another type (or other buckets).
    // `help` is taken from the first creation of the family. A removed series is revived (its
    // value kept) when asked for again.
    Counter& counter(std::string_view name, std::string_view help, const Labels& labels = {});
    Gauge& gauge(std::string_view name, std::string_view help, const Labels& labels = {});
    Histogram& histogram(std::string_view name, std::string_view help, const Labels& labels = {},
                         const std::vector<double>& buckets = latency_buckets());

    // Hides a series from render(); its object stays valid (updates go nowhere visible).
    // Unknown name/labels: no-op.
    void remove(std::string_view name, const Labels& labels);

    // The whole registry in text format 0.0.4: families in creation order, HELP/TYPE once per
    // family, series in creation order.
    std::string render() const;

    static constexpr std::string_view kContentType = "text/plain; version=0.0.4; charset=utf-8";

private:
    enum class Type { Counter, Gauge, Histogram };
    struct Series;
    struct Family;
    Series& get_or_create(Type type, std::string_view name, std::string_view help,
                          const Labels& labels, const std::vector<double>* buckets);

    mutable std::mutex mutex_;
    std::vector<std::unique_ptr<Family>> families_;
    std::unordered_map<std::string, Family*> by_name_;
};

// Text-format helpers (exposed for tests and for anyone writing exposition by hand).
std::string escape_label_value(std::string_view v);
std::string escape_help(std::string_view v);
std::string format_value(double v);  // shortest round-trip; +Inf, -Inf, NaN

}  // namespace pdr::metrics
