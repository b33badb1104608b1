#include "net/server/reply.hpp"

namespace pdr::server {

awaitable<void> respond_error(Exchange& ex, Errc e, std::string_view message,
                              std::string_view param) {
    if (ex.responded() || ex.client_gone()) {
        co_return;
    }
    Response res{error_info(e).status, ex.request().version()};
    res.set(http::field::content_type, "application/json");
    if (e == Errc::TooManyRequests) {
        res.set(http::field::retry_after, "1");  // slots free as requests end: soon
    }
    res.body() = openai_error_body(e, message, param);
    co_await ex.respond(std::move(res));
}

awaitable<void> respond_relayed(Exchange& ex, unsigned status, std::string_view content_type,
                                std::string body, std::string_view retry_after) {
    if (ex.responded() || ex.client_gone()) {
        co_return;
    }
    Response res{static_cast<http::status>(status), ex.request().version()};
    if (!content_type.empty()) {
        res.set(http::field::content_type, content_type);
    }
    if (!retry_after.empty()) {
        res.set(http::field::retry_after, retry_after);
    }
    res.body() = std::move(body);
    co_await ex.respond(std::move(res));
}

}  // namespace pdr::server
