#pragma once
// Whole answers a handler sends on an Exchange: an error from the error table, or an answer
// relayed as it came (status, content type, body, Retry-After). Both are no-ops when the client
// is gone or an answer has started, so any path may call them last.
#include "net/common/error.hpp"
#include "net/server/http_server.hpp"

#include <string>
#include <string_view>

namespace pdr::server {

// An error of the table (net/common/error.hpp): its status and JSON error body; a 429 says when
// to come back (Retry-After: 1).
awaitable<void> respond_error(Exchange& ex, Errc e, std::string_view message,
                              std::string_view param = {});
// Relays an answer as it is: status, content type, body, and the upstream's Retry-After when it
// sent one (a 429 or 503 that says when to come back).
awaitable<void> respond_relayed(Exchange& ex, unsigned status, std::string_view content_type,
                                std::string body, std::string_view retry_after = {});

}  // namespace pdr::server
