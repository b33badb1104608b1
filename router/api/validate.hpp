#pragma once
// Input checks for the generation routes: content type, JSON, required fields (OpenAI-style
// errors, no upstream call). Pure functions; unit-tested as a table.
#include "net/common/error.hpp"
#include "router/disagg/rewrite.hpp"

#include <string>
#include <string_view>
#include <vector>

namespace pdr::api {

enum class GenerationKind { Completions, ChatCompletions };

struct ValidationError {
    Errc errc = Errc::Ok;
    std::string message;
    std::string param;  // the offending field, or empty
    bool ok() const noexcept { return errc == Errc::Ok; }
};

struct ParsedGeneration {
    JsonObjectView body;  // the scanned client body (an object); points into the body text
    bool stream = false;  // "stream": true
};

// `content_type` is the request's Content-Type value ("" when absent). `body` must outlive `out`.
ValidationError validate_generation(GenerationKind kind, std::string_view content_type,
                                    std::string_view body, ParsedGeneration& out);

// Parses a JSON object body for the admin/internal routes: 400 when not JSON or not an object.
ValidationError parse_object(std::string_view body, disagg::Json& out);

// The body of POST /internal/nixl/lease_refresh: {"request_ids": [<string>...]}, at most
// kMaxLeaseRefreshIds ids (more: 400, to be sent in several requests).
inline constexpr std::size_t kMaxLeaseRefreshIds = 10'000;
ValidationError parse_lease_refresh(std::string_view body, std::vector<std::string>& ids);

}  // namespace pdr::api
