#include "router/api/routes.hpp"

#include "config/ascii.hpp"

#include <array>

namespace pdr::api {

namespace {

struct Entry {
    std::string_view path;
    http::verb method;
    std::string_view method_name;
    RouteId id;
};

constexpr std::array kRoutes{
    Entry{"/v1/completions", http::verb::post, "POST", RouteId::Completions},
    Entry{"/v1/chat/completions", http::verb::post, "POST", RouteId::ChatCompletions},
    Entry{"/v1/models", http::verb::get, "GET, HEAD", RouteId::Models},
    Entry{"/health", http::verb::get, "GET, HEAD", RouteId::Health},
    Entry{"/status", http::verb::get, "GET, HEAD", RouteId::Status},
    Entry{"/metrics", http::verb::get, "GET, HEAD", RouteId::Metrics},
    Entry{"/instances/add", http::verb::post, "POST", RouteId::InstancesAdd},
    Entry{"/instances/remove", http::verb::post, "POST", RouteId::InstancesRemove},
    Entry{"/instances", http::verb::get, "GET, HEAD", RouteId::InstancesList},
    Entry{"/internal/nixl/lease_refresh", http::verb::post, "POST", RouteId::LeaseRefresh},
    // vLLM's serving routes that need no disaggregation (vllm/entrypoints/openai/api_server.py
    // and the pooling/score routers): passed through to one instance.
    Entry{"/tokenize", http::verb::post, "POST", RouteId::PassThrough},
    Entry{"/detokenize", http::verb::post, "POST", RouteId::PassThrough},
    Entry{"/version", http::verb::get, "GET, HEAD", RouteId::PassThrough},
    Entry{"/v1/embeddings", http::verb::post, "POST", RouteId::PassThrough},
    Entry{"/pooling", http::verb::post, "POST", RouteId::PassThrough},
    Entry{"/classify", http::verb::post, "POST", RouteId::PassThrough},
    Entry{"/score", http::verb::post, "POST", RouteId::PassThrough},
    Entry{"/v1/score", http::verb::post, "POST", RouteId::PassThrough},
    Entry{"/rerank", http::verb::post, "POST", RouteId::PassThrough},
    Entry{"/v1/rerank", http::verb::post, "POST", RouteId::PassThrough},
    Entry{"/v2/rerank", http::verb::post, "POST", RouteId::PassThrough},
};

}  // namespace

// The path of an absolute-form target ("http://host:port/v1/completions"), which a server must
// accept (RFC 9112 3.2.2); an origin-form target as it is.
std::string_view origin_form(std::string_view target) noexcept {
    for (std::string_view scheme : {std::string_view("http://"), std::string_view("https://")}) {
        if (ascii::istarts_with(target, scheme)) {
            target.remove_prefix(scheme.size());
            const auto slash = target.find_first_of("/?");
            if (slash == std::string_view::npos || target[slash] == '?') {
                return "/";
            }
            return target.substr(slash);
        }
    }
    return target;
}

RouteMatch match_route(http::verb method, std::string_view target) noexcept {
    RouteMatch m;
    target = origin_form(target);
    m.path = target.substr(0, target.find('?'));
    for (const Entry& e : kRoutes) {
        if (e.path != m.path) {
            continue;
        }
        // HEAD is a GET without the body (RFC 9110 9.3.2; the server sends the head only)
        if (e.method == method || (method == http::verb::head && e.method == http::verb::get)) {
            m.kind = RouteMatch::Kind::Found;
            m.id = e.id;
            return m;
        }
        m.kind = RouteMatch::Kind::MethodNotAllowed;
        m.allow = e.method_name;
    }
    return m;
}

metrics::Route metrics_route(RouteId id) noexcept {
    using R = metrics::Route;
    switch (id) {
        case RouteId::Completions:
            return R::Completions;
        case RouteId::ChatCompletions:
            return R::ChatCompletions;
        case RouteId::Models:
            return R::Models;
        case RouteId::Health:
            return R::Health;
        case RouteId::Status:
            return R::Status;
        case RouteId::Metrics:
            return R::Metrics;
        case RouteId::InstancesAdd:
        case RouteId::InstancesRemove:
        case RouteId::InstancesList:
            return R::Instances;
        case RouteId::LeaseRefresh:
            return R::LeaseRefresh;
        case RouteId::PassThrough:
            return R::PassThrough;
    }
    return R::Other;
}

}  // namespace pdr::api
