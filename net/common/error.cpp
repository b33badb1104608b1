#include "net/common/error.hpp"

#include "net/common/sse_cut.hpp"

#include <nlohmann/json.hpp>

#include <array>

namespace pdr {

namespace {

using http_status = boost::beast::http::status;

struct Entry {
    Errc errc;
    http_status status;
    std::string_view type;
    std::string_view code;
    std::string_view message;  // default text for error_category::message
};

constexpr std::string_view kInvalid = "invalid_request_error";
constexpr std::string_view kServer = "server_error";

// Indexed by the Errc value; checked by the static_assert below.
constexpr std::array kTable{
    Entry{Errc::Ok, http_status::ok, "", "ok", "success"},
    Entry{Errc::BadJson, http_status::bad_request, kInvalid, "invalid_json",
          "request body is not valid JSON"},
    Entry{Errc::NotAnObject, http_status::bad_request, kInvalid, "not_an_object",
          "request body is not a JSON object"},
    Entry{Errc::MissingField, http_status::bad_request, kInvalid, "missing_field",
          "a required field is missing"},
    Entry{Errc::InvalidField, http_status::bad_request, kInvalid, "invalid_field",
          "a field has an invalid value"},
    Entry{Errc::UnsupportedMediaType, http_status::unsupported_media_type, kInvalid,
          "unsupported_media_type", "unsupported media type"},
    Entry{Errc::BodyTooLarge, http_status::payload_too_large, kInvalid, "body_too_large",
          "request body too large"},
    Entry{Errc::HeadersTooLarge, http_status::request_header_fields_too_large, kInvalid,
          "headers_too_large", "request headers too large"},
    Entry{Errc::NotFound, http_status::not_found, kInvalid, "not_found", "not found"},
    Entry{Errc::MethodNotAllowed, http_status::method_not_allowed, kInvalid, "method_not_allowed",
          "method not allowed"},
    Entry{Errc::Unauthorized, http_status::unauthorized, "authentication_error", "unauthorized",
          "unauthorized"},
    Entry{Errc::Forbidden, http_status::forbidden, "permission_error", "forbidden", "forbidden"},
    Entry{Errc::Conflict, http_status::conflict, kInvalid, "conflict", "conflict"},
    Entry{Errc::TooManyRequests, http_status::too_many_requests, "rate_limit_error",
          "too_many_requests", "too many concurrent requests"},
    Entry{Errc::NoPrefillInstance, http_status::service_unavailable, kServer, "no_prefill_instance",
          "no healthy prefill instance"},
    Entry{Errc::NoDecodeInstance, http_status::service_unavailable, kServer, "no_decode_instance",
          "no healthy decode instance"},
    Entry{Errc::UpstreamConnect, http_status::bad_gateway, kServer, "upstream_connect_error",
          "could not connect to upstream"},
    Entry{Errc::UpstreamTimeout, http_status::gateway_timeout, kServer, "upstream_timeout",
          "upstream timed out"},
    Entry{Errc::UpstreamProtocol, http_status::bad_gateway, kServer, "upstream_protocol_error",
          "upstream sent an invalid answer"},
    Entry{Errc::UpstreamClosed, http_status::bad_gateway, kServer, "upstream_closed",
          "upstream closed the connection before a full answer"},
    Entry{Errc::MissingKvParams, http_status::bad_gateway, kServer, "missing_kv_transfer_params",
          "prefill answer has no kv_transfer_params"},
    Entry{Errc::ShuttingDown, http_status::service_unavailable, kServer, "shutting_down",
          "server is shutting down"},
    Entry{Errc::Internal, http_status::internal_server_error, kServer, "internal_error",
          "internal error"},
    Entry{Errc::BadHttp, http_status::bad_request, kInvalid, "bad_http_request",
          "malformed HTTP request"},
    Entry{Errc::TooManyConnections, http_status::service_unavailable, kServer,
          "too_many_connections", "too many client connections"},
    Entry{Errc::DuplicateRequestId, http_status::conflict, kInvalid, "duplicate_request_id",
          "request id already in flight"},
    Entry{Errc::HttpVersion, http_status::http_version_not_supported, kInvalid,
          "http_version_not_supported", "HTTP version not supported"},
    Entry{Errc::UpstreamAnswerMismatch, http_status::bad_gateway, kServer,
          "upstream_answer_mismatch", "upstream answer names another request (X-Request-Id)"},
    Entry{Errc::UpstreamEncoding, http_status::bad_gateway, kServer, "upstream_protocol_error",
          "upstream answer is compressed or has a transfer coding other than chunked (not "
          "relayed: the router asks for none)"},
    Entry{Errc::KvModeMismatch, http_status::bad_gateway, kServer, "kv_mode_mismatch",
          "the prefill instance does not run the router's KV mode"},
    Entry{Errc::LoopDetected, http_status::loop_detected, kServer, "loop_detected",
          "the request came back to the router that sent it (an instance is this router)"},
    Entry{Errc::ServerBusy, http_status::service_unavailable, kServer, "server_busy",
          "the server is receiving too many request bodies at once"},
};

constexpr bool table_in_order() {
    for (std::size_t i = 0; i < kTable.size(); ++i) {
        if (static_cast<std::size_t>(kTable[i].errc) != i) {
            return false;
        }
    }
    return kTable.size() == static_cast<std::size_t>(Errc::ServerBusy) + 1;
}
static_assert(table_in_order(), "kTable must list every Errc in declaration order");

const Entry& entry(Errc e) noexcept {
    auto i = static_cast<std::size_t>(e);
    return i < kTable.size() ? kTable[i] : kTable[static_cast<std::size_t>(Errc::Internal)];
}

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wnon-virtual-dtor"
class RouterCategory final : public boost::system::error_category {
public:
    const char* name() const noexcept override { return "pdr"; }
    std::string message(int ev) const override {
        return std::string(entry(static_cast<Errc>(ev)).message);
    }
};
#pragma GCC diagnostic pop

nlohmann::ordered_json error_object(Errc e, std::string_view message, std::string_view param) {
    const Entry& en = entry(e);
    nlohmann::ordered_json err = nlohmann::ordered_json::object();
    err["message"] = message.empty() ? en.message : message;
    err["type"] = en.type;
    err["param"] = param.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(param);
    err["code"] = en.code;
    nlohmann::ordered_json root = nlohmann::ordered_json::object();
    root["error"] = std::move(err);
    return root;
}

}  // namespace

const boost::system::error_category& router_category() noexcept {
    static const RouterCategory category;
    return category;
}

boost::system::error_code make_error_code(Errc e) noexcept {
    return {static_cast<int>(e), router_category()};
}

ErrorInfo error_info(Errc e) noexcept {
    const Entry& en = entry(e);
    return {en.status, en.type, en.code};
}

std::string openai_error_body(Errc e, std::string_view message, std::string_view param) {
    // `replace` keeps invalid UTF-8 from upstream/client text from throwing.
    return error_object(e, message, param)
        .dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

std::string openai_error_event(Errc e, std::string_view message) {
    return sse_data_event(openai_error_body(e, message));
}

}  // namespace pdr
