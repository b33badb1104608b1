#pragma once
// Assertions shared by the integration tests (gtest AssertionResult: use with EXPECT_TRUE).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/support/cluster.hpp"

namespace pdr::test {

// Sends `body` to the route it belongs to.
HttpResponse send_generation(const Server& router, const nlohmann::json& body,
                             const Headers& headers = {}, Ms timeout = Ms{15000});
// 200, the right content type, text == expected_text(body); streams end with [DONE] and carry
// no error event.
::testing::AssertionResult answer_ok(const HttpResponse& r, const nlohmann::json& body);
// No pdsim saw a protocol violation (pdsims a test killed are skipped, here and below).
::testing::AssertionResult no_violations(const PdCluster& pd);
// Every prefill's blocks_held reaches 0 within `bound`.
::testing::AssertionResult kv_freed(const PdCluster& pd, Ms bound);
// Sum of one /debug/state counter over the servers still running.
long long sum_counter(const std::vector<Server*>& servers, const std::string& name);
// The SSE events of a body that are error events (`data: {"error": ...}`).
std::vector<std::string> error_events(const std::string& body);

}  // namespace pdr::test
