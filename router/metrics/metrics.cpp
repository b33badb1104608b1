#include "router/metrics/metrics.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <stdexcept>

namespace pdr::metrics {

// ---- values --------------------------------------------------------------------------------

void Counter::inc(double v) noexcept {
    if (!(v >= 0)) {
        return;  // also rejects NaN
    }
    value_.fetch_add(v, std::memory_order_relaxed);
}

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)),
      buckets_(std::make_unique<std::atomic<std::uint64_t>[]>(bounds_.size() + 1)) {
    for (std::size_t i = 0; i <= bounds_.size(); ++i) {
        buckets_[i].store(0);
    }
}

void Histogram::observe(double v) noexcept {
    if (std::isnan(v)) {
        return;
    }
    // Prometheus buckets are "less than or equal": the first bound >= v.
    auto it = std::lower_bound(bounds_.begin(), bounds_.end(), v);
    auto idx = static_cast<std::size_t>(it - bounds_.begin());
    buckets_[idx].fetch_add(1, std::memory_order_relaxed);
    sum_.fetch_add(v, std::memory_order_relaxed);
}

std::uint64_t Histogram::count() const noexcept {
    std::uint64_t n = 0;
    for (std::size_t i = 0; i <= bounds_.size(); ++i) {
        n += buckets_[i].load(std::memory_order_relaxed);
    }
    return n;
}

std::vector<std::uint64_t> Histogram::cumulative_counts() const {
    std::vector<std::uint64_t> out(bounds_.size() + 1);
    std::uint64_t running = 0;
    for (std::size_t i = 0; i <= bounds_.size(); ++i) {
        running += buckets_[i].load(std::memory_order_relaxed);
        out[i] = running;
    }
    return out;
}

std::vector<double> latency_buckets() {
    return {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
            0.5,    1,     2.5,    5,     10,   15,    20,   30,  60};
}

// ---- text helpers --------------------------------------------------------------------------

std::string escape_label_value(std::string_view v) {
    std::string out;
    out.reserve(v.size());
    for (char c : v) {
        switch (c) {
            case '\\':
                out += "\\\\";
                break;
            case '"':
                out += "\\\"";
                break;
            case '\n':
                out += "\\n";
                break;
            default:
                out += c;
        }
    }
    return out;
}

std::string escape_help(std::string_view v) {
    std::string out;
    out.reserve(v.size());
    for (char c : v) {
        switch (c) {
            case '\\':
                out += "\\\\";
                break;
            case '\n':
                out += "\\n";
                break;
            default:
                out += c;
        }
    }
    return out;
}

std::string format_value(double v) {
    if (std::isnan(v)) {
        return "NaN";
    }
    if (std::isinf(v)) {
        return v > 0 ? "+Inf" : "-Inf";
    }
    char buf[64];
    auto res = std::to_chars(buf, buf + sizeof buf, v);
    return std::string(buf, res.ptr);
}

namespace {

bool valid_metric_name(std::string_view s) {
    if (s.empty()) {
        return false;
    }
    for (std::size_t i = 0; i < s.size(); ++i) {
        char c = s[i];
        bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':';
        bool digit = c >= '0' && c <= '9';
        if (!alpha && !(digit && i > 0)) {
            return false;
        }
    }
    return true;
}

bool valid_label_name(std::string_view s) {
    if (s.empty() || s.starts_with("__")) {
        return false;
    }
    for (std::size_t i = 0; i < s.size(); ++i) {
        char c = s[i];
        bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
        bool digit = c >= '0' && c <= '9';
        if (!alpha && !(digit && i > 0)) {
            return false;
        }
    }
    return true;
}

// `{a="x",b="y"` without the closing brace, or "" when there are no labels and no extra label.
void append_labels(std::string& out, const Labels& labels, std::string_view extra_name = {},
                   std::string_view extra_value = {}) {
    if (labels.empty() && extra_name.empty()) {
        return;
    }
    out += '{';
    bool first = true;
    for (const auto& [k, v] : labels) {
        if (!first) {
            out += ',';
        }
        first = false;
        out += k;
        out += "=\"";
        out += escape_label_value(v);
        out += '"';
    }
    if (!extra_name.empty()) {
        if (!first) {
            out += ',';
        }
        out += extra_name;
        out += "=\"";
        out += extra_value;
        out += '"';
    }
    out += '}';
}

}  // namespace

// ---- registry ------------------------------------------------------------------------------

struct Registry::Series {
    Labels labels;  // sorted by name
    bool hidden = false;
    std::unique_ptr<Counter> counter;
    std::unique_ptr<Gauge> gauge;
    std::unique_ptr<Histogram> histogram;
};

struct Registry::Family {
    std::string name;
    std::string help;
    Type type;
    std::vector<double> buckets;  // histograms only
    std::vector<std::unique_ptr<Series>> series;
};

Registry::Registry() = default;
Registry::~Registry() = default;

namespace {

Labels normalized(const Labels& labels, bool histogram) {
    Labels out = labels;
    std::sort(out.begin(), out.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
    for (std::size_t i = 0; i < out.size(); ++i) {
        if (!valid_label_name(out[i].first)) {
            throw std::invalid_argument("metrics: invalid label name '" + out[i].first + "'");
        }
        if (histogram && out[i].first == "le") {
            throw std::invalid_argument("metrics: label 'le' is reserved for histograms");
        }
        if (i > 0 && out[i].first == out[i - 1].first) {
            throw std::invalid_argument("metrics: duplicate label name '" + out[i].first + "'");
        }
    }
    return out;
}

void check_buckets(const std::vector<double>& b) {
    for (std::size_t i = 0; i < b.size(); ++i) {
        if (!std::isfinite(b[i]) || (i > 0 && !(b[i] > b[i - 1]))) {
            throw std::invalid_argument(
                "metrics: histogram buckets must be finite and strictly increasing");
        }
    }
}

}  // namespace

Registry::Series& Registry::get_or_create(Type type, std::string_view name, std::string_view help,
                                          const Labels& labels,
                                          const std::vector<double>* buckets) {
    if (!valid_metric_name(name)) {
        throw std::invalid_argument("metrics: invalid metric name '" + std::string(name) + "'");
    }
    Labels key = normalized(labels, type == Type::Histogram);
    std::lock_guard lock(mutex_);
    Family* fam = nullptr;
    if (auto it = by_name_.find(std::string(name)); it != by_name_.end()) {
        fam = it->second;
        if (fam->type != type) {
            throw std::logic_error("metrics: '" + std::string(name) +
                                   "' already registered with another type");
        }
        if (buckets != nullptr && *buckets != fam->buckets) {
            throw std::logic_error("metrics: '" + std::string(name) +
                                   "' already registered with other buckets");
        }
    } else {
        if (buckets != nullptr) {
            check_buckets(*buckets);
        }
        auto f = std::make_unique<Family>();
        f->name = std::string(name);
        f->help = std::string(help);
        f->type = type;
        if (buckets != nullptr) {
            f->buckets = *buckets;
        }
        fam = f.get();
        by_name_.emplace(f->name, fam);
        families_.push_back(std::move(f));
    }
    for (auto& s : fam->series) {
        if (s->labels == key) {
            s->hidden = false;
            return *s;
        }
    }
    auto s = std::make_unique<Series>();
    s->labels = std::move(key);
    switch (type) {
        case Type::Counter:
            s->counter = std::make_unique<Counter>();
            break;
        case Type::Gauge:
            s->gauge = std::make_unique<Gauge>();
            break;
        case Type::Histogram:
            s->histogram = std::make_unique<Histogram>(fam->buckets);
            break;
    }
    fam->series.push_back(std::move(s));
    return *fam->series.back();
}

Counter& Registry::counter(std::string_view name, std::string_view help, const Labels& labels) {
    return *get_or_create(Type::Counter, name, help, labels, nullptr).counter;
}

Gauge& Registry::gauge(std::string_view name, std::string_view help, const Labels& labels) {
    return *get_or_create(Type::Gauge, name, help, labels, nullptr).gauge;
}

Histogram& Registry::histogram(std::string_view name, std::string_view help, const Labels& labels,
                               const std::vector<double>& buckets) {
    return *get_or_create(Type::Histogram, name, help, labels, &buckets).histogram;
}

void Registry::remove(std::string_view name, const Labels& labels) {
    Labels key;
    try {
        key = normalized(labels, false);
    } catch (const std::invalid_argument&) {
        return;  // such a series cannot exist
    }
    std::lock_guard lock(mutex_);
    auto it = by_name_.find(std::string(name));
    if (it == by_name_.end()) {
        return;
    }
    for (auto& s : it->second->series) {
        if (s->labels == key) {
            s->hidden = true;
        }
    }
}

std::string Registry::render() const {
    std::string out;
    std::lock_guard lock(mutex_);
    out.reserve(families_.size() * 256);
    for (const auto& fam : families_) {
        out += "# HELP ";
        out += fam->name;
        out += ' ';
        out += escape_help(fam->help);
        out += "\n# TYPE ";
        out += fam->name;
        switch (fam->type) {
            case Type::Counter:
                out += " counter\n";
                break;
            case Type::Gauge:
                out += " gauge\n";
                break;
            case Type::Histogram:
                out += " histogram\n";
                break;
        }
        for (const auto& s : fam->series) {
            if (s->hidden) {
                continue;
            }
            if (fam->type != Type::Histogram) {
                double v = s->counter ? s->counter->value() : s->gauge->value();
                out += fam->name;
                append_labels(out, s->labels);
                out += ' ';
                out += format_value(v);
                out += '\n';
                continue;
            }
            const Histogram& h = *s->histogram;
            // Read the buckets once so _bucket{le="+Inf"} and _count agree.
            auto cum = h.cumulative_counts();
            for (std::size_t i = 0; i < cum.size(); ++i) {
                out += fam->name;
                out += "_bucket";
                std::string le = i < fam->buckets.size() ? format_value(fam->buckets[i]) : "+Inf";
                append_labels(out, s->labels, "le", le);
                out += ' ';
                out += std::to_string(cum[i]);
                out += '\n';
            }
            out += fam->name;
            out += "_sum";
            append_labels(out, s->labels);
            out += ' ';
            out += format_value(h.sum());
            out += '\n';
            out += fam->name;
            out += "_count";
            append_labels(out, s->labels);
            out += ' ';
            out += std::to_string(cum.back());
            out += '\n';
        }
    }
    return out;
}

}  // namespace pdr::metrics
