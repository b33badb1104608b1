// libFuzzer target for what the router reads in a prefill instance's answer: the KV handle
// (pull mode's kv_transfer_params), push mode's answer check, and the LMCache flow's /tokenize
// answer and first token. A handle found must be a JSON object, and it must splice into a
// decode body as one. Build and run: scripts/fuzz kv_handle SECONDS. Seeds: corpus/kv_handle/.
#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "router/disagg/lmcache_rewrite.hpp"
#include "router/disagg/push_rewrite.hpp"
#include "router/disagg/rewrite.hpp"

namespace {

bool is_object(std::string_view text) {
    const auto j = nlohmann::json::parse(text, nullptr, false);
    return !j.is_discarded() && j.is_object();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    using namespace pdr::disagg;
    const std::string_view in(reinterpret_cast<const char*>(data), size);
    KvHandle handle;
    if (parse_kv_handle(in, handle) == HandleStatus::Ok) {
        if (!is_object(handle.params)) {
            std::abort();
        }
        const std::string body = make_decode_body(R"({"model":"m","prompt":"hi"})", handle.params);
        if (!is_object(body)) {
            std::abort();
        }
    }
    std::string mode;
    check_push_answer(in, mode);
    std::vector<std::int64_t> tokens;
    std::string error;
    if (lmcache::parse_tokens(in, tokens, error)) {
        lmcache::token_array(tokens);
    }
    lmcache::FirstToken first;
    lmcache::parse_first_token(in, first, error);
    return 0;
}
