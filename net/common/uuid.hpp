#pragma once
// Random (version 4) UUIDs for request ids: "xxxxxxxx-xxxx-4xxx-yxxx-xxxxxxxxxxxx", lower-case hex.
// Boost.Uuid's generator over a per-thread mt19937 seeded once from the OS (thread-safe, ~50 ns
// an id; docs/libraries.md has the measurement). Not for secrets.
#include <string>

namespace pdr {

std::string make_uuid_v4();

}  // namespace pdr
