#pragma once
// Push mode's request and answer rules (PROTOCOLS.md §4): the prefill leg's KV request with the
// transfer id, the decode leg's kv_transfer_params naming P's KV coordinates, and the check of
// P's answer. No I/O here: every rule is unit-tested directly.
#include "config/config.hpp"
#include "net/common/json_scan.hpp"

#include <string>
#include <string_view>

namespace pdr::disagg {

// "xfer-" + a fresh UUIDv4: new for every dispatch of a request's legs, retries included.
std::string new_transfer_id();

// The prefill leg's kv_transfer_params, as text: the pull-mode request object, plus
// "transfer_id" when given (push mode), plus "pdx_control" (the router agent's descriptor,
// base64) when given.
std::string prefill_kv_request(std::string_view transfer_id, std::string_view control);

// The decode leg's kv_transfer_params in push mode: do_remote_decode false, do_remote_prefill
// true, P's engine id, side-channel host and port, TP and PP sizes, the request id (P's
// X-Request-Id) as remote_request_id, and the transfer id; no block ids.
std::string push_decode_params(const config::PushCoords& p, std::string_view kv_host,
                               std::string_view request_id, std::string_view transfer_id);

// What P's answer says about the push. Ok: its kv_transfer_params say "transfer_mode":"push".
// NotJson: not a JSON object (within the JSON limits). WrongMode: anything else; `mode` is what
// it said ("missing" when it said nothing).
enum class PushAnswer { Ok, NotJson, WrongMode };
PushAnswer check_push_answer(std::string_view prefill_answer, std::string& mode);

}  // namespace pdr::disagg
