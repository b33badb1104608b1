// The request scanner (net/common/json_scan) against simdjson 3.0 On-Demand, in one run:
//   1. exact spans: a simdjson adapter yields JsonMember-like spans (key as written, value as
//      written, kind) from raw_json_token / current_location / object::raw_json; they are compared
//      with JsonObjectView's on a corpus and on seeded random mutations, with the verdicts;
//   2. errors: simdjson's error code and message for each corpus text that is not JSON;
//   3. speed: ns per scan of a 200-byte completion, a 4 KiB chat and a 1 MiB prompt.
// Build and run: bench/libs/run.sh (needs libsimdjson-dev, which pdrouter itself does not use).
#include <simdjson.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "net/common/json_scan.hpp"
#include "tests/unit/net/common/json_scan_corpus.hpp"

namespace od = simdjson::ondemand;

namespace {

struct Span {
    std::string_view key_text, value;
    pdr::JsonKind kind;
    bool operator==(const Span&) const = default;
};

struct SimdResult {
    simdjson::error_code error = simdjson::SUCCESS;
    bool object = false;
    std::vector<Span> members;
};

// The bytes from `from` up to (not including) the next token at `to`, less trailing whitespace.
std::string_view up_to(const char* from, const char* to) {
    std::string_view s(from, static_cast<std::size_t>(to - from));
    while (!s.empty() &&
           (s.back() == ' ' || s.back() == '\t' || s.back() == '\n' || s.back() == '\r')) {
        s.remove_suffix(1);
    }
    return s;
}

// Validates a value completely (On-Demand checks only what is read): every string decoded,
// every number converted, every literal read. `depth` bounds recursion like kMaxJsonDepth.
simdjson::error_code walk(od::value v, std::size_t depth, pdr::JsonKind& kind) {
    od::json_type t;
    if (auto e = v.type().get(t)) {
        return e;
    }
    const bool container = t == od::json_type::object || t == od::json_type::array;
    if (container && depth + 1 > pdr::kMaxJsonDepth) {
        return simdjson::DEPTH_ERROR;
    }
    switch (t) {
        case od::json_type::object: {
            kind = pdr::JsonKind::Object;
            od::object o;
            if (auto e = v.get_object().get(o)) {
                return e;
            }
            std::size_t n = 0;
            for (auto field : o) {
                std::string_view k;
                if (auto e = field.unescaped_key().get(k)) {
                    return e;
                }
                if (++n > pdr::kMaxJsonObjectMembers) {
                    return simdjson::CAPACITY;
                }
                pdr::JsonKind ignored;
                if (auto e = walk(field.value(), depth + 1, ignored)) {
                    return e;
                }
            }
            return simdjson::SUCCESS;
        }
        case od::json_type::array: {
            kind = pdr::JsonKind::Array;
            od::array a;
            if (auto e = v.get_array().get(a)) {
                return e;
            }
            for (auto element : a) {
                od::value ev;
                if (auto e = element.get(ev)) {
                    return e;
                }
                pdr::JsonKind ignored;
                if (auto e = walk(ev, depth + 1, ignored)) {
                    return e;
                }
            }
            return simdjson::SUCCESS;
        }
        case od::json_type::string: {
            kind = pdr::JsonKind::String;
            std::string_view s;
            return v.get_string().get(s);
        }
        case od::json_type::number: {
            kind = pdr::JsonKind::Number;
            // get_double, not get_number: 3.0's get_number refuses integers beyond 64 bits,
            // which nlohmann reads as doubles.
            double d;
            return v.get_double().get(d);
        }
        case od::json_type::boolean: {
            kind = pdr::JsonKind::Boolean;
            bool b;
            return v.get_bool().get(b);
        }
        case od::json_type::null: {
            kind = pdr::JsonKind::Null;
            bool is_null = false;
            if (auto e = v.is_null().get(is_null)) {
                return e;
            }
            return is_null ? simdjson::SUCCESS : simdjson::N_ATOM_ERROR;
        }
    }
    return simdjson::TAPE_ERROR;
}

// 3.0 has no document::at_end(): current_location() fails once the last token is consumed.
bool has_more(od::document& doc) {
    const char* p = nullptr;
    return doc.current_location().get(p) == simdjson::SUCCESS;
}

// The adapter: top-level members with exact spans, every value validated. Spans point into
// `padded` (the caller maps them back onto its own text by offset).
SimdResult simd_scan(od::parser& parser, const simdjson::padded_string_view padded) {
    SimdResult r;
    od::document doc;
    if ((r.error = parser.iterate(padded).get(doc))) {
        return r;
    }
    od::json_type t;
    if ((r.error = doc.type().get(t))) {
        return r;
    }
    if (t != od::json_type::object) {
        r.object = false;
        od::value v;
        // A scalar document cannot be read as a value in 3.0: read it by type.
        switch (t) {
            case od::json_type::array: {
                od::array a;
                if ((r.error = doc.get_array().get(a))) {
                    return r;
                }
                for (auto element : a) {
                    od::value ev;
                    pdr::JsonKind k;
                    if ((r.error = element.get(ev)) || (r.error = walk(ev, 1, k))) {
                        return r;
                    }
                }
                break;
            }
            case od::json_type::string: {
                std::string_view s;
                r.error = doc.get_string().get(s);
                break;
            }
            case od::json_type::number: {
                double d;
                r.error = doc.get_double().get(d);
                break;
            }
            case od::json_type::boolean: {
                bool b;
                r.error = doc.get_bool().get(b);
                break;
            }
            default: {
                bool n = false;
                r.error = doc.is_null().get(n);
                if (!r.error && !n) {
                    r.error = simdjson::N_ATOM_ERROR;
                }
            }
        }
        if (!r.error && has_more(doc)) {
            r.error = simdjson::TRAILING_CONTENT;
        }
        return r;
    }
    r.object = true;
    od::object o;
    if ((r.error = doc.get_object().get(o))) {
        return r;
    }
    for (auto field : o) {
        od::field f;
        if ((r.error = std::move(field).get(f))) {
            return r;
        }
        // Key as written: from the quote before raw() to the value's token, less ':' and spaces.
        const char* key_start = f.key().raw() - 1;
        od::value v = f.value();
        const char* value_start = nullptr;
        if ((r.error = v.current_location().get(value_start))) {
            return r;
        }
        std::string_view key_text = up_to(key_start, value_start);
        key_text.remove_suffix(1);  // ':'
        key_text = up_to(key_text.data(), key_text.data() + key_text.size());
        std::string_view unescaped;
        if ((r.error = f.unescaped_key().get(unescaped))) {
            return r;
        }
        Span s{key_text, {}, pdr::JsonKind::Null};
        if (r.members.size() + 1 > pdr::kMaxJsonObjectMembers) {
            r.error = simdjson::CAPACITY;
            return r;
        }
        if ((r.error = walk(v, 1, s.kind))) {
            return r;
        }
        const char* next = nullptr;
        if ((r.error = doc.current_location().get(next))) {
            return r;
        }
        s.value = up_to(value_start, next);
        r.members.push_back(s);
    }
    if (has_more(doc)) {
        r.error = simdjson::TRAILING_CONTENT;
    }
    return r;
}

pdr::JsonScanStatus status_of(const SimdResult& r) {
    switch (r.error) {
        case simdjson::SUCCESS:
            return r.object ? pdr::JsonScanStatus::Ok : pdr::JsonScanStatus::NotObject;
        case simdjson::DEPTH_ERROR:
            return pdr::JsonScanStatus::TooDeep;
        case simdjson::CAPACITY:
            return pdr::JsonScanStatus::TooManyMembers;
        default:
            return pdr::JsonScanStatus::NotJson;
    }
}

const char* status_name(pdr::JsonScanStatus s) {
    constexpr const char* kNames[] = {"Ok", "NotJson", "NotObject", "TooDeep", "TooManyMembers"};
    return kNames[static_cast<int>(s)];
}

// json_scan_test's corpus, and texts whose spans are easy to get wrong: escaped keys and strings,
// nested objects, spaces around every token, a brace inside a string; and documents that are
// a scalar followed by whitespace (simdjson 3.0.1 reads a root "null " as not null).
std::vector<std::string> corpus() {
    std::vector<std::string> texts = pdr::test::json_scan_corpus();
    texts.insert(texts.end(),
                 {" {\"a\" : [1, 2] , \"b\\u0063\":\"x\\\"y\", \"n\":-12, \"o\":{\"p\":null}} ",
                  "{\"k\":{\"x\":1,\"y\":[1,{\"z\":2}],\"x\":\"dup\"},\"o\":2}",
                  "{\"kv_transfer_params\" :\n {\"remote_request_id\":\"r\\\\1\"}\t,\"s\":\"}\"}",
                  "null\n", "null ", "true ", "1\n"});
    return texts;
}

std::string printable(const std::string& text) {
    return nlohmann::json(text).dump(-1, ' ', true, nlohmann::json::error_handler_t::replace);
}

struct Compare {
    int texts = 0, verdicts_differ = 0, spans_differ = 0;
    std::vector<std::string> examples;
};

void compare(od::parser& parser, const std::string& text, Compare& c, bool print_errors) {
    ++c.texts;
    pdr::JsonObjectView ours;
    const pdr::JsonScanStatus st = ours.scan(text);
    // simdjson 3.0 does not skip a UTF-8 byte order mark; the adapter would (as ours does).
    const std::size_t bom = text.starts_with("\xEF\xBB\xBF") ? 3 : 0;
    const simdjson::padded_string padded(text.substr(bom));
    const SimdResult simd = simd_scan(parser, padded);
    const pdr::JsonScanStatus sst = status_of(simd);
    const auto origin = [&](std::string_view in_padded) {  // map a span back onto `text`
        return std::string_view(text.data() + bom + (in_padded.data() - padded.data()),
                                in_padded.size());
    };
    if (print_errors && simd.error) {
        std::printf("  %-46.46s ours %-14s simdjson %-16s \"%s\"\n", printable(text).c_str(),
                    status_name(st), simdjson::error_message(simd.error) ? status_name(sst) : "",
                    simdjson::error_message(simd.error));
    }
    if (st != sst) {
        ++c.verdicts_differ;
        if (c.examples.size() < 40) {
            c.examples.push_back(printable(text) + ": ours " + status_name(st) + ", simdjson " +
                                 status_name(sst) + " (" + simdjson::error_message(simd.error) +
                                 ")");
        }
        return;
    }
    if (st != pdr::JsonScanStatus::Ok) {
        return;
    }
    bool same = ours.members().size() == simd.members.size();
    for (std::size_t i = 0; same && i < simd.members.size(); ++i) {
        const pdr::JsonMember& m = ours.members()[i];
        const Span& s = simd.members[i];
        same = m.key_text == origin(s.key_text) && m.value == origin(s.value) &&
               m.key_text.data() == origin(s.key_text).data() &&
               m.value.data() == origin(s.value).data() && m.kind == s.kind;
    }
    if (!same) {
        ++c.spans_differ;
        if (c.examples.size() < 40) {
            c.examples.push_back("spans differ: " + text);
        }
    }
}

std::string completion_200() {
    return R"({"model":"meta-llama/Llama-3.1-8B-Instruct","prompt":"Write a haiku about the sea and the wind.","max_tokens":64,"temperature":0.7,"stream":true,"stream_options":{"include_usage":true}})";
}

std::string chat_4k() {
    std::string s = R"({"model":"meta-llama/Llama-3.1-8B-Instruct","messages":[)";
    s +=
        R"({"role":"system","content":"You are a helpful assistant. Answer briefly and cite sources when you can."})";
    int turn = 0;
    while (s.size() < 4000) {
        s += turn % 2 ? R"(,{"role":"assistant","content":")" : R"(,{"role":"user","content":")";
        s += "Turn " + std::to_string(turn) +
             ": the quick brown fox jumps over the lazy dog; \\\"quoted\\\" text, a tab\\t, "
             "caf\\u00e9 and \xe2\x82\xac 42. The quick brown fox jumps over the lazy dog.\"}";
        ++turn;
    }
    s += R"(],"max_tokens":256,"temperature":0.2,"top_p":0.95,"stream":true})";
    return s;
}

std::string prompt_1m() {
    std::string s = R"({"model":"m","prompt":")";
    const std::string line =
        "Lorem ipsum dolor sit amet, consectetur adipiscing elit; sed do eiusmod. ";
    while (s.size() < (1u << 20) - 64) {
        s += line;
    }
    s += R"(","max_tokens":16,"stream":false})";
    return s;
}

// Best ns per call of each of `fs`, over 9 rounds that interleave them (a burst of load from
// other processes on the shared machine then hits all of them alike).
template <std::size_t N>
std::array<double, N> best_ns(const std::array<std::function<void()>, N>& fs, int reps) {
    std::array<double, N> best;
    best.fill(1e30);
    for (int round = 0; round < 9; ++round) {
        for (std::size_t k = 0; k < N; ++k) {
            const auto t0 = std::chrono::steady_clock::now();
            for (int i = 0; i < reps; ++i) {
                fs[k]();
            }
            const auto t1 = std::chrono::steady_clock::now();
            best[k] =
                std::min(best[k], std::chrono::duration<double, std::nano>(t1 - t0).count() / reps);
        }
    }
    return best;
}

}  // namespace

int main() {
    od::parser parser;
    std::printf("simdjson %d.%d.%d; stage 1 (runtime dispatch): %s; On-Demand (compile time): %s\n",
                simdjson::SIMDJSON_VERSION_MAJOR, simdjson::SIMDJSON_VERSION_MINOR,
                simdjson::SIMDJSON_VERSION_REVISION,
                simdjson::get_active_implementation()->name().c_str(),
                SIMDJSON_STRINGIFY(SIMDJSON_BUILTIN_IMPLEMENTATION));

    std::printf("\nErrors on the corpus (ours: the JsonScanStatus; simdjson: error_message):\n");
    Compare c;
    const std::vector<std::string> texts = corpus();
    for (const std::string& t : texts) {
        compare(parser, t, c, true);
    }
    std::mt19937 rng(12345);  // the mutations of json_scan_test's differential test
    for (int round = 0; round < 20000; ++round) {
        const std::string text = pdr::test::mutated_json_scan_text(rng);
        compare(parser, text, c, false);
    }
    for (const std::string& t : {std::string("{\"a\":") + std::string(pdr::kMaxJsonDepth, '[') +
                                     std::string(pdr::kMaxJsonDepth, ']') + "}",
                                 std::string("{\"a\":") + std::string(pdr::kMaxJsonDepth - 1, '[') +
                                     std::string(pdr::kMaxJsonDepth - 1, ']') + "}",
                                 completion_200(), chat_4k(), prompt_1m()}) {
        compare(parser, t, c, true);
    }
    std::printf("\nDifferential: %d texts, verdicts differ on %d, spans differ on %d\n", c.texts,
                c.verdicts_differ, c.spans_differ);
    for (const auto& e : c.examples) {
        std::printf("  %s\n", e.c_str());
    }

    std::printf("\nSpeed (best of 9 interleaved rounds; ns per scan):\n");
    std::printf("  %-22s %12s %18s %18s\n", "body", "ours", "simdjson+copy", "simdjson no copy");
    const std::pair<const char*, std::string> bodies[] = {{"completion 200 B", completion_200()},
                                                          {"chat 4 KiB", chat_4k()},
                                                          {"prompt 1 MiB", prompt_1m()}};
    for (const auto& [name, body] : bodies) {
        const int reps = body.size() > 100000 ? 200 : body.size() > 1000 ? 20000 : 200000;
        std::size_t sink = 0;
        pdr::JsonObjectView view;
        // The router's body is a std::string without simdjson's 64 bytes of padding: a copy
        // into a reused padded buffer is part of the cost ("+copy"); "no copy" assumes a body
        // read into a padded buffer in the first place.
        std::string buffer;
        buffer.reserve(body.size() + simdjson::SIMDJSON_PADDING);
        std::string fixed(body);
        fixed.reserve(body.size() + simdjson::SIMDJSON_PADDING);
        const simdjson::padded_string_view p(fixed.data(), fixed.size(), fixed.capacity());
        const auto [ours, with_copy, no_copy] = best_ns<3>(
            {[&] { sink += static_cast<std::size_t>(view.scan(body)) + view.members().size(); },
             [&] {
                 buffer.assign(body);
                 simdjson::padded_string_view b(buffer.data(), buffer.size(), buffer.capacity());
                 sink += simd_scan(parser, b).members.size();
             },
             [&] { sink += simd_scan(parser, p).members.size(); }},
            reps);
        std::printf("  %-13s %7zu B %9.0f ns %15.0f ns %15.0f ns   (%.2f / %.2f GB/s ours/simd)\n",
                    name, body.size(), ours, with_copy, no_copy, body.size() / ours,
                    body.size() / with_copy);
        if (sink == 1) {
            std::puts("");
        }
    }
}
