#pragma once
// Blocking libcurl helpers for pdsim's loopback test (the servers run on another thread).
#include <curl/curl.h>
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

namespace pdr::sim::test_util {

using namespace std::chrono_literals;

struct Reply {
    long status = 0;
    std::string body;
    CURLcode code = CURLE_OK;
    std::string content_type;
};

struct Sink {
    std::string* out;
    std::size_t abort_after_events;  // 0: never
};

inline std::size_t on_data(char* data, std::size_t size, std::size_t n, void* user) {
    auto* sink = static_cast<Sink*>(user);
    sink->out->append(data, size * n);
    if (sink->abort_after_events > 0) {
        std::size_t events = 0;
        for (std::size_t p = sink->out->find("\n\n"); p != std::string::npos;
             p = sink->out->find("\n\n", p + 2)) {
            ++events;
        }
        if (events >= sink->abort_after_events) {
            return 0;  // makes curl abort the transfer and close the connection
        }
    }
    return size * n;
}

inline Reply call(const std::string& method, unsigned short port, const std::string& path,
                  const std::string& body = {}, const std::vector<std::string>& headers = {},
                  std::size_t abort_after_events = 0, long timeout_ms = 10'000) {
    Reply r;
    CURL* c = curl_easy_init();
    const std::string url = "http://127.0.0.1:" + std::to_string(port) + path;
    curl_easy_setopt(c, CURLOPT_URL, url.c_str());
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method.c_str());
    curl_slist* list = nullptr;
    for (const auto& h : headers) {
        list = curl_slist_append(list, h.c_str());
    }
    if (method == "POST") {
        list = curl_slist_append(list, "Content-Type: application/json");
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, body.c_str());
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, static_cast<long>(body.size()));
    }
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, list);
    Sink sink{&r.body, abort_after_events};
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &sink);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, timeout_ms);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    r.code = curl_easy_perform(c);
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r.status);
    char* ct = nullptr;
    if (curl_easy_getinfo(c, CURLINFO_CONTENT_TYPE, &ct) == CURLE_OK && ct) {
        r.content_type = ct;
    }
    curl_slist_free_all(list);
    curl_easy_cleanup(c);
    return r;
}

// Splits an SSE body into the payloads of its `data:` events.
inline std::vector<std::string> sse_payloads(const std::string& body) {
    std::vector<std::string> out;
    std::size_t pos = 0;
    for (std::size_t end = body.find("\n\n"); end != std::string::npos;
         end = body.find("\n\n", pos)) {
        std::string ev = body.substr(pos, end - pos);
        EXPECT_EQ(ev.rfind("data: ", 0), 0u) << ev;
        out.push_back(ev.substr(6));
        pos = end + 2;
    }
    EXPECT_EQ(pos, body.size()) << "trailing bytes after the last event";
    return out;
}

template <class Pred>
bool wait_until(Pred pred, std::chrono::milliseconds limit = 5000ms) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < deadline) {
        if (pred()) {
            return true;
        }
        std::this_thread::sleep_for(10ms);
    }
    return pred();
}

}  // namespace pdr::sim::test_util
