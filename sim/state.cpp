#include "sim/state.hpp"
#include "net/common/json_limits.hpp"

#include <cstdio>

namespace pdr::sim {

using nlohmann::json;

void SimState::add_violation(std::string message) {
    ++counters.protocol_violations;
    violations_.push_back(std::move(message));
    while (violations_.size() > kMaxViolations) {
        violations_.pop_front();
    }
}

void SimState::log_request(std::string_view path, json headers, std::string_view body) {
    json parsed = parse_untrusted_json(body);
    if (parsed.is_discarded()) {
        parsed = std::string(body);
    }
    log_.push_back(
        json{{"path", path}, {"headers", std::move(headers)}, {"body", std::move(parsed)}});
    while (log_.size() > kMaxLoggedRequests) {
        log_.pop_front();
    }
}

void SimState::reset() {
    const auto in_flight = counters.in_flight;  // requests still running keep being accounted
    const auto decode_blocks = counters.decode_blocks_in_use;
    counters = Counters{};
    counters.in_flight = in_flight;
    counters.decode_blocks_in_use = decode_blocks;
    violations_.clear();
    log_.clear();
}

json state_json(const Identity& id, const SimState& s, const BlockStore& store) {
    const Counters& c = s.counters;
    const FreeCounters& f = store.counters();
    json violations = json::array();
    for (const auto& v : s.violations()) {
        violations.push_back(v);
    }
    return json{{"role", id.role},
                {"engine_id", id.engine_id},
                {"port", id.port},
                {"requests", c.requests},
                {"serving_requests", c.serving_requests},
                {"completed", c.completed},
                {"protocol_violations", c.protocol_violations},
                {"violations", std::move(violations)},
                {"blocks_held", store.blocks_held()},
                {"requests_held", store.requests_held()},
                {"freed_by_read", f.freed_by_read},
                {"freed_by_expiry", f.freed_by_expiry},
                {"freed_by_abort", f.freed_by_abort},
                {"lease_refreshes", c.lease_refreshes},
                {"lease_refresh_calls", c.lease_refresh_calls},
                {"lease_refresh_unknown", c.lease_refresh_unknown},
                {"kv_reads", c.kv_reads},
                {"kv_read_failures", c.kv_read_failures},
                {"local_prefills", c.local_prefills},
                {"client_disconnects", c.client_disconnects},
                {"in_flight", c.in_flight},
                {"kv_transfer_bytes", c.kv_transfer_bytes},
                {"kv_transfer_us", c.kv_transfer_us},
                {"faults_applied", c.faults_applied},
                {"probes", c.probes},
                {"probes_with_key", c.probes_with_key}};
}

json requests_json(const SimState& s) {
    json list = json::array();
    for (const auto& r : s.request_log()) {
        list.push_back(r);
    }
    return json{{"requests", std::move(list)}};
}

namespace {

std::string escape_label(std::string_view v) {
    std::string out;
    for (char ch : v) {
        if (ch == '\\' || ch == '"') {
            out.push_back('\\');
            out.push_back(ch);
        } else if (ch == '\n') {
            out += "\\n";
        } else {
            out.push_back(ch);
        }
    }
    return out;
}

void family(std::string& out, std::string_view name, std::string_view type, std::string_view help,
            std::string_view labels, double value) {
    out += "# HELP ";
    out += name;
    out += ' ';
    out += help;
    out += "\n# TYPE ";
    out += name;
    out += ' ';
    out += type;
    out += '\n';
    out += name;
    out += labels;
    out += ' ';
    // integers print without a fraction; the usage ratio keeps its digits
    if (value == static_cast<double>(static_cast<std::uint64_t>(value))) {
        out += std::to_string(static_cast<std::uint64_t>(value));
    } else {
        char buf[32];
        std::snprintf(buf, sizeof buf, "%.6f", value);
        out += buf;
    }
    out += '\n';
}

}  // namespace

std::string metrics_text(const Identity& id, const SimState& s, const BlockStore& store) {
    const Counters& c = s.counters;
    const std::string labels = "{model_name=\"" + escape_label(id.model) + "\"}";
    const double blocks =
        static_cast<double>(store.blocks_held() + static_cast<std::size_t>(c.decode_blocks_in_use));
    double usage = blocks / static_cast<double>(kKvCapacityBlocks);
    if (usage > 1.0) {
        usage = 1.0;
    }
    std::string out;
    family(out, "vllm:num_requests_running", "gauge", "Number of requests in model execution.",
           labels, static_cast<double>(c.in_flight));
    family(out, "vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.",
           labels, 0);
    family(out, "vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.",
           labels, usage);
    family(out, "vllm:request_success_total", "counter",
           "Count of successfully processed requests.", labels, static_cast<double>(c.completed));
    family(out, "vllm:prompt_tokens_total", "counter", "Number of prefill tokens processed.",
           labels, static_cast<double>(c.prompt_tokens));
    family(out, "vllm:generation_tokens_total", "counter", "Number of generation tokens processed.",
           labels, static_cast<double>(c.generation_tokens));
    family(out, "pdsim_protocol_violations_total", "counter",
           "Requests that broke the P/D rewrite rules.", labels,
           static_cast<double>(c.protocol_violations));
    family(out, "pdsim_kv_blocks_held", "gauge", "KV blocks held for remote decode.", labels,
           static_cast<double>(store.blocks_held()));
    family(out, "pdsim_kv_blocks_free", "gauge", "KV blocks free in the engine's pool.", labels,
           static_cast<double>(store.blocks_free()));
    family(out, "pdsim_kv_bytes_verified_total", "counter",
           "KV bytes a decode received and checked word by word.", labels,
           static_cast<double>(c.kv_bytes_verified));
    family(out, "pdsim_kv_verify_failures_total", "counter",
           "Decode requests refused because their KV had wrong or stale bytes.", labels,
           static_cast<double>(c.kv_verify_failures));
    family(out, "pdsim_kv_read_failures_total", "counter",
           "Decode requests whose KV could not be read or pushed.", labels,
           static_cast<double>(c.kv_read_failures));
    return out;
}

}  // namespace pdr::sim
