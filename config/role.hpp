#pragma once
// An instance's role in a disaggregated deployment: one enum for the config, the router's
// registry and metrics, and pdsim.
namespace pdr {

enum class Role { Prefill = 0, Decode = 1 };

}  // namespace pdr
