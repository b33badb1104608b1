// The route table: every route with its method, 405 with Allow for the wrong method, 404 else.
#include "router/api/routes.hpp"

#include <gtest/gtest.h>

namespace pdr::api {
namespace {

using Kind = RouteMatch::Kind;

struct Row {
    http::verb method;
    std::string_view target;
    Kind kind;
    RouteId id;
    std::string_view allow;
};

const Row kRows[] = {
    {http::verb::post, "/v1/completions", Kind::Found, RouteId::Completions, ""},
    {http::verb::post, "/v1/chat/completions", Kind::Found, RouteId::ChatCompletions, ""},
    {http::verb::get, "/v1/models", Kind::Found, RouteId::Models, ""},
    {http::verb::get, "/health", Kind::Found, RouteId::Health, ""},
    {http::verb::get, "/status", Kind::Found, RouteId::Status, ""},
    {http::verb::get, "/metrics", Kind::Found, RouteId::Metrics, ""},
    {http::verb::post, "/instances/add", Kind::Found, RouteId::InstancesAdd, ""},
    {http::verb::post, "/instances/remove", Kind::Found, RouteId::InstancesRemove, ""},
    {http::verb::get, "/instances", Kind::Found, RouteId::InstancesList, ""},
    {http::verb::post, "/internal/nixl/lease_refresh", Kind::Found, RouteId::LeaseRefresh, ""},
    {http::verb::get, "/metrics?name=x", Kind::Found, RouteId::Metrics, ""},
    // vLLM's other serving routes: passed through
    {http::verb::post, "/v1/embeddings", Kind::Found, RouteId::PassThrough, ""},
    {http::verb::post, "/tokenize", Kind::Found, RouteId::PassThrough, ""},
    {http::verb::post, "/v2/rerank", Kind::Found, RouteId::PassThrough, ""},
    {http::verb::get, "/version", Kind::Found, RouteId::PassThrough, ""},
    {http::verb::head, "/version", Kind::Found, RouteId::PassThrough, ""},
    {http::verb::get, "/score", Kind::MethodNotAllowed, RouteId::Completions, "POST"},
    // HEAD: a GET route's head
    {http::verb::head, "/health", Kind::Found, RouteId::Health, ""},
    {http::verb::head, "/v1/models", Kind::Found, RouteId::Models, ""},
    {http::verb::head, "/metrics", Kind::Found, RouteId::Metrics, ""},
    {http::verb::post, "/v1/completions?x=1", Kind::Found, RouteId::Completions, ""},
    // wrong method
    {http::verb::get, "/v1/completions", Kind::MethodNotAllowed, RouteId::Completions, "POST"},
    {http::verb::put, "/v1/chat/completions", Kind::MethodNotAllowed, RouteId::Completions, "POST"},
    {http::verb::post, "/v1/models", Kind::MethodNotAllowed, RouteId::Completions, "GET, HEAD"},
    {http::verb::delete_, "/instances", Kind::MethodNotAllowed, RouteId::Completions, "GET, HEAD"},
    {http::verb::head, "/v1/completions", Kind::MethodNotAllowed, RouteId::Completions, "POST"},
    {http::verb::get, "/instances/add", Kind::MethodNotAllowed, RouteId::Completions, "POST"},
    {http::verb::get, "/internal/nixl/lease_refresh", Kind::MethodNotAllowed, RouteId::Completions,
     "POST"},
    // unknown
    {http::verb::get, "/", Kind::NotFound, RouteId::Completions, ""},
    {http::verb::post, "/v1/completions/", Kind::NotFound, RouteId::Completions, ""},
    {http::verb::post, "/v1/embedding", Kind::NotFound, RouteId::Completions, ""},
    {http::verb::post, "/v1/audio/speech", Kind::NotFound, RouteId::Completions, ""},
    {http::verb::get, "/healthz", Kind::NotFound, RouteId::Completions, ""},
    {http::verb::get, "", Kind::NotFound, RouteId::Completions, ""},
};

TEST(Routes, Table) {
    for (const Row& row : kRows) {
        SCOPED_TRACE(std::string(http::to_string(row.method)) + " " + std::string(row.target));
        RouteMatch m = match_route(row.method, row.target);
        EXPECT_EQ(m.kind, row.kind);
        if (row.kind == Kind::Found) {
            EXPECT_EQ(m.id, row.id);
        }
        EXPECT_EQ(m.allow, row.allow);
    }
}

TEST(Routes, AbsoluteFormTargetsRouteByTheirPath) {
    auto m = match_route(http::verb::post, "http://127.0.0.1:8000/v1/completions");
    EXPECT_EQ(m.kind, RouteMatch::Kind::Found);
    EXPECT_EQ(m.id, RouteId::Completions);
    EXPECT_EQ(m.path, "/v1/completions");
    EXPECT_EQ(match_route(http::verb::get, "HTTP://h/status?x=1").path, "/status");
    EXPECT_EQ(match_route(http::verb::get, "https://h:1/health").id, RouteId::Health);
    EXPECT_EQ(match_route(http::verb::get, "http://h").path, "/");
    EXPECT_EQ(match_route(http::verb::get, "http://h?q").path, "/");
    EXPECT_EQ(match_route(http::verb::get, "http:/status").kind, RouteMatch::Kind::NotFound);
}

TEST(Routes, PathDropsTheQueryString) {
    EXPECT_EQ(match_route(http::verb::get, "/status?verbose=1").path, "/status");
    EXPECT_EQ(match_route(http::verb::get, "/nope?x").path, "/nope");
}

TEST(Routes, MetricsLabels) {
    EXPECT_EQ(metrics_route(RouteId::Completions), metrics::Route::Completions);
    EXPECT_EQ(metrics_route(RouteId::ChatCompletions), metrics::Route::ChatCompletions);
    EXPECT_EQ(metrics_route(RouteId::InstancesAdd), metrics::Route::Instances);
    EXPECT_EQ(metrics_route(RouteId::InstancesList), metrics::Route::Instances);
    EXPECT_EQ(metrics_route(RouteId::LeaseRefresh), metrics::Route::LeaseRefresh);
    EXPECT_EQ(metrics_route(RouteId::Metrics), metrics::Route::Metrics);
}

}  // namespace
}  // namespace pdr::api
