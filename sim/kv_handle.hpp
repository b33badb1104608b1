#pragma once
// The pull-mode KV handle (vLLM NixlConnector kv_transfer_params) as pdsim produces and
// consumes it, and the checks of the router's prefill-leg rewrite rules (PROTOCOLS.md §2).
#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace pdr::sim {

struct KvHandle {
    std::string engine_id;
    std::string request_id;
    std::string host;
    unsigned short port = 0;
    std::vector<std::int64_t> block_ids;  // flattened when given as a list of lists
    int num_tokens = 0;
};

// The prefill answer's top-level kv_transfer_params for `h`.
nlohmann::json kv_handle_json(const KvHandle& h);

// Validates a decode-leg kv_transfer_params object. Returns an error message when it is not a
// usable pull-mode handle (do_remote_prefill true plus engine id, request id, host, port and
// block ids), else fills `out`.
std::optional<std::string> parse_kv_handle(const nlohmann::json& params, KvHandle& out);

// Checks a prefill-leg request (one that carries kv_transfer_params) against the pull-mode
// rewrite rules: stream false, max_tokens 1 (and max_completion_tokens 1 if present), no
// stream_options / min_tokens / min_completion_tokens, kv_transfer_params.do_remote_decode true,
// an X-Request-Id header. Returns one message per breach (empty when the request is clean).
std::vector<std::string> check_prefill_request(const nlohmann::json& body, bool has_request_id);

}  // namespace pdr::sim
