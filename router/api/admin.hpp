#pragma once
// Admin API (PROTOCOLS.md §6): POST /instances/add, POST /instances/remove, GET /instances;
// the same key guards POST /internal/nixl/lease_refresh (handlers.cpp).
// Auth: `X-API-Key: <key>` or `Authorization: Bearer <key>`, compared in constant time with the
// configured admin key. No key configured → admin routes disabled (403); missing → 401;
// wrong → 403.
#include "net/server/http_server.hpp"
#include "router/instances/registry.hpp"
#include "router/metrics/router_metrics.hpp"

#include <string_view>

namespace pdr::kv {
class LeaseKeeper;
}

namespace pdr::api {

enum class AdminAuth { Ok, Disabled, Missing, Wrong };

AdminAuth check_admin_auth(const server::Request& req, std::string_view admin_key) noexcept;

// Equal strings → true; the time taken depends only on the lengths.
bool constant_time_equals(std::string_view a, std::string_view b) noexcept;

// Checks the admin key of a request to an admin route; when it does not pass, answers 401/403
// (counted in pdrouter_admin_requests_total under `action`) and returns false.
awaitable<bool> admit_admin(server::Exchange& ex, std::string_view action,
                            metrics::RouterMetrics& metrics, std::string_view admin_key);

enum class AdminAction { Add, Remove, List };

// Runs one admin request (auth, body checks, registry call) and answers it. `leases`
// (nullable): GET /instances shows each prefill's lease_refresh from it.
awaitable<void> handle_admin(server::Exchange& ex, AdminAction action,
                             instances::Registry& registry, metrics::RouterMetrics& metrics,
                             std::string_view admin_key, config::KvMode mode,
                             const kv::LeaseKeeper* leases = nullptr);

}  // namespace pdr::api
