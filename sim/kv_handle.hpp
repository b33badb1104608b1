#pragma once
// kv_transfer_params as pdsim produces and consumes them: the pull-mode KV handle (vLLM
// NixlConnector), LMCache mode's prefill parameters (ret_first_tok, disagg_spec), and the
// checks of the router's prefill-leg rewrite rules (PROTOCOLS.md §2 and §5).
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
    // pdsim over the transfer core: the prefill agent's instance (its generation: blocks of
    // another instance are gone) and its KV layout id; 0 / absent over HTTP.
    std::uint64_t agent_instance = 0;
    std::uint32_t layout = 0;
};

// The prefill answer's top-level kv_transfer_params for `h`.
nlohmann::json kv_handle_json(const KvHandle& h);

// Validates a decode-leg kv_transfer_params object. Returns an error message when it is not a
// usable pull-mode handle (do_remote_prefill true plus engine id, request id, host, port and
// block ids), else fills `out`.
std::optional<std::string> parse_kv_handle(const nlohmann::json& params, KvHandle& out);

// Push mode (docs/protocols.md, "Push mode"). A decode leg's kv_transfer_params with
// do_remote_prefill true and a transfer_id (and no block ids) asks the decode to register its
// blocks with the prefill named there.
struct PushParams {
    std::string engine_id;
    std::string request_id;
    std::string host;
    unsigned short port = 0;
    std::string transfer_id;
};
bool is_push_params(const nlohmann::json& params);
std::optional<std::string> parse_push_params(const nlohmann::json& params, PushParams& out);
// The prefill's answer in push mode (it holds the blocks and writes them once D registers).
nlohmann::json push_answer_json(const KvHandle& h, const std::string& transfer_id);
// A non-empty string field of a prefill leg's kv_transfer_params ("" when absent or not one).
std::string string_param(const nlohmann::json& params, const char* key);

// Checks a prefill-leg request (one that carries kv_transfer_params) against the pull-mode
// rewrite rules: stream false, max_tokens 1 (and max_completion_tokens 1 if present), no
// stream_options / min_tokens / min_completion_tokens, kv_transfer_params.do_remote_decode true,
// an X-Request-Id header. Returns one message per breach (empty when the request is clean).
std::vector<std::string> check_prefill_request(const nlohmann::json& body, bool has_request_id);

// LMCache mode: where a prefill moves the KV (one receiver per decode TP rank) and the id its
// "KV ready" notifications carry.
struct DisaggSpec {
    std::string req_id;
    std::string receiver_host;
    std::vector<unsigned short> init_ports;   // per D rank
    std::vector<unsigned short> alloc_ports;  // per D rank
};
struct LmcacheParams {
    bool ret_first_tok = false;
    std::optional<DisaggSpec> spec;  // absent: no KV moves, no notification
};
// Parses a prefill's kv_transfer_params in LMCache mode. Returns an error message when they
// are malformed (disagg_spec not an object, req_id / receiver_host not non-empty strings, port
// lists empty, of different lengths, longer than 64, or holding a non-port).
std::optional<std::string> parse_lmcache_params(const nlohmann::json& params, LmcacheParams& out);

// Checks an LMCache-mode prefill request: stream false, max_tokens 1 (and max_completion_tokens
// 1 if present), no stream_options / min_tokens / min_completion_tokens, a prompt of token ids,
// ret_first_tok true, an X-Request-Id header (`request_id`, empty when absent) equal to
// disagg_spec.req_id when both are there. One message per breach.
std::vector<std::string> check_lmcache_prefill_request(const nlohmann::json& body,
                                                       const std::string& request_id);

}  // namespace pdr::sim
