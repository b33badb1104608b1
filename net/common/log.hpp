#pragma once
// Leveled logging to stderr, as text or one JSON object per line. Thread-safe; a line is
// written with a single write(2). Use the macros so disabled levels cost one comparison.
#include "config/log_level.hpp"

#include <cstddef>
#include <string>
#include <string_view>

namespace pdr::log {

void configure(Level level, Format format);
Level level() noexcept;
bool parse_level(std::string_view s, Level& out) noexcept;

// A value a client or an operator gave, for a log line or an error message: itself when it is
// at most `max` bytes, else its first `max` bytes and "... (N bytes)".
std::string clip(std::string_view value, std::size_t max = 128);

// Writes one line: time, level, component, the message, and the request id if not empty.
void write(Level level, std::string_view component, std::string_view message,
           std::string_view request_id = {});

}  // namespace pdr::log

#define PDR_LOG(lvl, component, ...)                                          \
    do {                                                                      \
        if (static_cast<int>(lvl) >= static_cast<int>(::pdr::log::level())) { \
            ::pdr::log::write(lvl, component, __VA_ARGS__);                   \
        }                                                                     \
    } while (0)
#define PDR_DEBUG(component, ...) PDR_LOG(::pdr::log::Level::Debug, component, __VA_ARGS__)
#define PDR_INFO(component, ...) PDR_LOG(::pdr::log::Level::Info, component, __VA_ARGS__)
#define PDR_WARN(component, ...) PDR_LOG(::pdr::log::Level::Warn, component, __VA_ARGS__)
#define PDR_ERROR(component, ...) PDR_LOG(::pdr::log::Level::Error, component, __VA_ARGS__)
