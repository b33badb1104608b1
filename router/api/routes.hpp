#pragma once
// The route table of pdrouter: method + path → route id, 404 for unknown paths, 405 (with the
// Allow value) for known paths with another method. Pure; unit-tested as a table.
#include "net/common/io.hpp"
#include "router/metrics/router_metrics.hpp"

#include <string_view>

namespace pdr::api {

enum class RouteId {
    Completions,
    ChatCompletions,
    Models,
    Health,
    Status,
    Metrics,
    InstancesAdd,
    InstancesRemove,
    InstancesList,
    LeaseRefresh,
    PassThrough,  // vLLM's other serving routes, to one instance (App::handle_pass_through)
};

struct RouteMatch {
    enum class Kind { Found, NotFound, MethodNotAllowed };
    Kind kind = Kind::NotFound;
    RouteId id = RouteId::Completions;  // valid when Found
    std::string_view allow;             // the allowed method, when MethodNotAllowed
    std::string_view path;              // the target without its query string
};

RouteMatch match_route(http::verb method, std::string_view target) noexcept;

// The path and query of a target: an absolute-form target ("http://host:port/v1/completions")
// without its scheme and authority, an origin-form target as it is.
std::string_view origin_form(std::string_view target) noexcept;

metrics::Route metrics_route(RouteId id) noexcept;

}  // namespace pdr::api
