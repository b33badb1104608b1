#pragma once
// One error enum for the router (and pdsim), with its own category so it mixes with Asio's
// error_code, and one table that maps each value to an HTTP status and an OpenAI error body.
#include <boost/beast/http/status.hpp>
#include <boost/system/error_code.hpp>

#include <string>
#include <string_view>

namespace pdr {

enum class Errc {
    Ok = 0,
    // client input
    BadJson = 1,           // 400 invalid_request_error
    NotAnObject,           // 400
    MissingField,          // 400
    InvalidField,          // 400
    UnsupportedMediaType,  // 415
    BodyTooLarge,          // 413
    HeadersTooLarge,       // 431
    NotFound,              // 404
    MethodNotAllowed,      // 405
    Unauthorized,          // 401
    Forbidden,             // 403
    Conflict,              // 409
    TooManyRequests,       // 429 (max concurrent requests reached)
    // upstream / availability
    NoPrefillInstance,       // 503
    NoDecodeInstance,        // 503
    UpstreamConnect,         // 502
    UpstreamTimeout,         // 504
    UpstreamProtocol,        // 502 (unparsable answer)
    UpstreamClosed,          // 502 (connection closed before a full answer)
    MissingKvParams,         // 502 (prefill answered without kv_transfer_params)
    ShuttingDown,            // 503
    Internal,                // 500
    BadHttp,                 // 400 malformed HTTP request (added by the net layer)
    TooManyConnections,      // 503 (--max-client-connections reached; added by the net layer)
    DuplicateRequestId,      // 409 (a client's X-Request-Id that a request in flight already uses)
    HttpVersion,             // 505 (a request line with an HTTP major version other than 1)
    UpstreamAnswerMismatch,  // 502 (the answer's X-Request-Id names another request)
    UpstreamEncoding,        // 502 (an answer with a content or transfer coding not relayed)
    KvModeMismatch,          // 502 (P answered a transfer_mode of another KV mode)
    LoopDetected,            // 508 (a request that already went through this router: a loop)
    ServerBusy,  // 503 (request bodies over the buffered-body budget; added by the net layer)
};

const boost::system::error_category& router_category() noexcept;
boost::system::error_code make_error_code(Errc e) noexcept;

struct ErrorInfo {
    boost::beast::http::status status;
    std::string_view type;  // OpenAI "type": invalid_request_error, server_error, ...
    std::string_view code;  // OpenAI "code": a stable snake_case name of the Errc
};
ErrorInfo error_info(Errc e) noexcept;

// {"error": {"message": ..., "type": ..., "param": null|"...", "code": ...}}
std::string openai_error_body(Errc e, std::string_view message, std::string_view param = {});
// The same object as one SSE event: `data: {"error": {...}}\n\n` (used once a stream has started).
std::string openai_error_event(Errc e, std::string_view message);

}  // namespace pdr

template <>
struct boost::system::is_error_code_enum<pdr::Errc> : std::true_type {};
