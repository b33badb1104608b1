#pragma once
// Random (version 4) UUIDs for request ids: "xxxxxxxx-xxxx-4xxx-yxxx-xxxxxxxxxxxx", lower-case hex.
// Fast and thread-safe: each thread owns a PRNG seeded once from std::random_device.
#include <string>

namespace pdr {

std::string make_uuid_v4();

}  // namespace pdr
