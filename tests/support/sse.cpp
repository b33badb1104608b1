#include "tests/support/sse.hpp"

#include <nlohmann/json.hpp>

namespace pdr::test {

std::vector<std::string> sse_data(const std::string& body) {
    std::vector<std::string> out;
    std::size_t pos = 0;
    while (pos < body.size()) {
        auto end = body.find("\n\n", pos);
        std::string event =
            body.substr(pos, end == std::string::npos ? std::string::npos : end - pos);
        pos = end == std::string::npos ? body.size() : end + 2;
        std::size_t lp = 0;
        std::string data;
        bool any = false;
        while (lp <= event.size()) {
            auto le = event.find('\n', lp);
            std::string line =
                event.substr(lp, le == std::string::npos ? std::string::npos : le - lp);
            lp = le == std::string::npos ? event.size() + 1 : le + 1;
            if (!line.empty() && line.back() == '\r') {
                line.pop_back();
            }
            if (line.rfind("data:", 0) == 0) {
                std::string v = line.substr(5);
                if (!v.empty() && v.front() == ' ') {
                    v.erase(0, 1);
                }
                data += (any ? "\n" : "") + v;
                any = true;
            }
        }
        if (any) {
            out.push_back(data);
        }
    }
    return out;
}

std::string answer_text(const std::string& body, bool stream, bool chat, std::string& error) {
    auto piece = [&](const nlohmann::json& j, bool delta) -> std::string {
        if (!j.is_object() || !j.contains("choices") || !j["choices"].is_array() ||
            j["choices"].empty()) {
            return {};
        }
        const auto& c = j["choices"][0];
        const nlohmann::json* v = nullptr;
        if (!chat) {
            v = c.contains("text") ? &c["text"] : nullptr;
        } else if (delta) {
            v = c.contains("delta") && c["delta"].contains("content") ? &c["delta"]["content"]
                                                                      : nullptr;
        } else {
            v = c.contains("message") && c["message"].contains("content") ? &c["message"]["content"]
                                                                          : nullptr;
        }
        return v && v->is_string() ? v->get<std::string>() : std::string();
    };
    if (!stream) {
        auto j = nlohmann::json::parse(body, nullptr, false);
        if (j.is_discarded()) {
            error = "answer is not JSON: " + body.substr(0, 200);
            return {};
        }
        return piece(j, false);
    }
    std::string text;
    for (const auto& d : sse_data(body)) {
        if (d == "[DONE]") {
            continue;
        }
        auto j = nlohmann::json::parse(d, nullptr, false);
        if (j.is_discarded()) {
            error = "SSE event is not JSON: " + d.substr(0, 200);
            return {};
        }
        text += piece(j, true);
    }
    return text;
}

}  // namespace pdr::test
