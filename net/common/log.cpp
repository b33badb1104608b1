#include "net/common/log.hpp"

#include <nlohmann/json.hpp>

#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <ctime>

namespace pdr::log {

namespace {

std::atomic<Level> g_level{Level::Info};
std::atomic<Format> g_format{Format::Text};

// "2026-11-21T19:10:00.123Z" (UTC, milliseconds); the seconds part is cached per thread.
void append_timestamp(std::string& out) {
    using namespace std::chrono;
    auto now = system_clock::now();
    auto ms = duration_cast<milliseconds>(now.time_since_epoch()).count();
    std::time_t secs = static_cast<std::time_t>(ms / 1000);
    thread_local std::time_t cached_secs = -1;
    thread_local char cached[24];
    if (secs != cached_secs) {
        std::tm tm{};
        gmtime_r(&secs, &tm);
        std::strftime(cached, sizeof cached, "%Y-%m-%dT%H:%M:%S", &tm);
        cached_secs = secs;
    }
    char frac[8];
    std::snprintf(frac, sizeof frac, ".%03dZ", static_cast<int>(ms % 1000));
    out += cached;
    out += frac;
}

std::string_view level_name(Level l) noexcept {
    switch (l) {
        case Level::Debug:
            return "DEBUG";
        case Level::Info:
            return "INFO";
        case Level::Warn:
            return "WARN";
        case Level::Error:
            return "ERROR";
        case Level::Off:
            return "OFF";
    }
    return "?";
}

std::string_view level_lower(Level l) noexcept {
    switch (l) {
        case Level::Debug:
            return "debug";
        case Level::Info:
            return "info";
        case Level::Warn:
            return "warn";
        case Level::Error:
            return "error";
        case Level::Off:
            return "off";
    }
    return "?";
}

void write_all(const std::string& line) {
    // One write(2) per line keeps lines whole between threads and processes (stderr is
    // unbuffered); loop only for the rare short write.
    const char* p = line.data();
    std::size_t left = line.size();
    while (left > 0) {
        ssize_t n = ::write(STDERR_FILENO, p, left);
        if (n < 0) {
            if (errno == EINTR) {
                continue;
            }
            return;
        }
        p += n;
        left -= static_cast<std::size_t>(n);
    }
}

}  // namespace

void configure(Level lvl, Format format) {
    g_level.store(lvl, std::memory_order_relaxed);
    g_format.store(format, std::memory_order_relaxed);
}

Level level() noexcept {
    return g_level.load(std::memory_order_relaxed);
}

std::string clip(std::string_view value, std::size_t max) {
    if (value.size() <= max) {
        return std::string(value);
    }
    return std::string(value.substr(0, max)) + "... (" + std::to_string(value.size()) + " bytes)";
}

bool parse_level(std::string_view s, Level& out) noexcept {
    auto eq = [s](std::string_view w) {
        if (s.size() != w.size()) {
            return false;
        }
        for (std::size_t i = 0; i < s.size(); ++i) {
            char c = s[i];
            if (c >= 'A' && c <= 'Z') {
                c = static_cast<char>(c - 'A' + 'a');
            }
            if (c != w[i]) {
                return false;
            }
        }
        return true;
    };
    if (eq("debug") || eq("trace")) {
        out = Level::Debug;
    } else if (eq("info")) {
        out = Level::Info;
    } else if (eq("warn") || eq("warning")) {
        out = Level::Warn;
    } else if (eq("error") || eq("critical") || eq("fatal")) {
        out = Level::Error;
    } else if (eq("off") || eq("none")) {
        out = Level::Off;
    } else {
        return false;
    }
    return true;
}

void write(Level lvl, std::string_view component, std::string_view message,
           std::string_view request_id) {
    // Off is never a line's level; a line below the configured level is dropped here too, so an
    // unguarded call (not through PDR_LOG) honours --log-level as the macros do.
    if (lvl == Level::Off ||
        static_cast<int>(lvl) < static_cast<int>(g_level.load(std::memory_order_relaxed))) {
        return;
    }
    std::string line;
    line.reserve(64 + component.size() + message.size() + request_id.size());
    if (g_format.load(std::memory_order_relaxed) == Format::Json) {
        std::string ts;
        append_timestamp(ts);
        nlohmann::json obj = nlohmann::json::object();
        obj["ts"] = std::move(ts);
        obj["level"] = level_lower(lvl);
        obj["component"] = component;
        obj["msg"] = message;
        if (!request_id.empty()) {
            obj["request_id"] = request_id;
        }
        line = obj.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    } else {
        append_timestamp(line);
        line += ' ';
        std::string_view name = level_name(lvl);
        line += name;
        line.append(name.size() < 5 ? 6 - name.size() : 1, ' ');
        line += '[';
        line += component;
        line += "] ";
        for (char c : message) {
            // one event, one line; no other control byte (a NUL or an escape sequence from a
            // client-supplied name) reaches the terminal or the log file as it is
            const auto u = static_cast<unsigned char>(c);
            if (c == '\n' || c == '\r' || c == '\t') {
                line += ' ';
            } else if (u < 0x20 || u == 0x7f) {
                line += '?';
            } else {
                line += c;
            }
        }
        if (!request_id.empty()) {
            line += " request_id=";
            line += request_id;
        }
    }
    line += '\n';
    write_all(line);
}

}  // namespace pdr::log
