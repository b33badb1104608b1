#include "tests/support/checks.hpp"

namespace pdr::test {

HttpResponse send_generation(const Server& router, const nlohmann::json& body,
                             const Headers& headers, Ms timeout) {
    HttpRequest req{"POST", route_of(body), headers, body.dump()};
    req.headers.emplace_back("Content-Type", "application/json");
    return http_request(router.port, req, timeout);
}

std::vector<std::string> error_events(const std::string& body) {
    std::vector<std::string> out;
    for (const auto& d : sse_data(body)) {
        auto j = nlohmann::json::parse(d, nullptr, false);
        if (j.is_object() && j.contains("error")) {
            out.push_back(d);
        }
    }
    return out;
}

::testing::AssertionResult answer_ok(const HttpResponse& r, const nlohmann::json& body) {
    const bool stream = body.value("stream", false);
    const bool chat = body.contains("messages");
    if (r.status != 200 || !r.complete) {
        return ::testing::AssertionFailure() << "expected a complete 200, got " << r.describe();
    }
    const std::string ct = r.header("content-type");
    if (stream && ct.find("text/event-stream") == std::string::npos) {
        return ::testing::AssertionFailure() << "stream content-type is '" << ct << "'";
    }
    if (!stream && ct.find("application/json") == std::string::npos) {
        return ::testing::AssertionFailure() << "non-stream content-type is '" << ct << "'";
    }
    std::string error;
    std::string text = answer_text(r.body, stream, chat, error);
    if (!error.empty()) {
        return ::testing::AssertionFailure() << error;
    }
    std::string want = expected_text(body);
    if (text != want) {
        return ::testing::AssertionFailure()
               << "text mismatch:\n  got:  '" << text << "'\n  want: '" << want
               << "'\n  body: " << r.body.substr(0, 800);
    }
    if (stream) {
        auto events = sse_data(r.body);
        if (events.empty() || events.back() != "[DONE]") {
            return ::testing::AssertionFailure()
                   << "stream does not end with [DONE]: " << r.body.substr(0, 800);
        }
        if (r.body.size() < 14 || r.body.compare(r.body.size() - 14, 14, "data: [DONE]\n\n") != 0) {
            return ::testing::AssertionFailure()
                   << "stream bytes do not end with 'data: [DONE]\\n\\n'";
        }
        if (!error_events(r.body).empty()) {
            return ::testing::AssertionFailure() << "stream carries an error event: " << r.body;
        }
    }
    return ::testing::AssertionSuccess();
}

::testing::AssertionResult no_violations(const PdCluster& pd) {
    std::vector<Server*> all = pd.prefill;
    all.insert(all.end(), pd.decode.begin(), pd.decode.end());
    for (auto* s : all) {
        if (!s->proc.running()) {
            continue;
        }
        auto st = sim_state(*s);
        if (counter(st, "protocol_violations") != 0) {
            return ::testing::AssertionFailure()
                   << s->name << " saw protocol violations: " << st.dump();
        }
    }
    return ::testing::AssertionSuccess();
}

::testing::AssertionResult kv_freed(const PdCluster& pd, Ms bound) {
    auto start = Clock::now();
    bool ok =
        wait_until([&] { return sum_counter(pd.prefill, "blocks_held") == 0; }, bound, Ms{25});
    if (ok) {
        return ::testing::AssertionSuccess();
    }
    auto f = ::testing::AssertionFailure();
    f << "prefill KV blocks still held after " << ms_between(start, Clock::now()) << " ms:";
    for (auto* p : pd.prefill) {
        if (p->proc.running()) {
            f << "\n  " << p->name << ": " << sim_state(*p).dump();
        }
    }
    return f;
}

long long sum_counter(const std::vector<Server*>& servers, const std::string& name) {
    long long sum = 0;
    for (auto* s : servers) {
        if (!s->proc.running()) {
            continue;  // killed on purpose by the test
        }
        long long v = counter(sim_state(*s), name);
        if (v < 0) {
            throw std::runtime_error(s->name + ": /debug/state has no counter '" + name + "'");
        }
        sum += v;
    }
    return sum;
}

}  // namespace pdr::test
