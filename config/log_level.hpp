#pragma once
// The log level and format a Config names. Defined here, below the platform's logger
// (net/common/log.hpp), so config/ stays a leaf that includes nothing above it.
namespace pdr::log {

enum class Level { Debug = 0, Info = 1, Warn = 2, Error = 3, Off = 4 };
enum class Format { Text, Json };

}  // namespace pdr::log
