#pragma once
// Internal to pdr::config: settings from one source checked and applied to a Config (apply.cpp),
// for parse_command_line, which layers the sources (parse.cpp).
#include <string>
#include <vector>

#include "config/options.hpp"

namespace pdr::config::detail {

// Where a setting was given, as error messages name it.
struct Source {
    enum class Type { Env, File, Flags } type;
    std::string file;

    std::string where(const RawSetting& s) const {
        switch (type) {
            case Type::Env:
                return "environment variable " + s.given;
            case Type::File:
                return "key '" + s.given + "' in config file '" + file + "'";
            case Type::Flags:
                break;
        }
        return "--" + s.given;
    }
};

// A configuration error: parse_command_line ends with exit code 2 and this message.
struct Failure {
    std::string message;
};

[[noreturn]] void fail(std::string message);

// Where each role's alias keys were last given (a source, as Source::where names it): a
// source that gives only one of the pair must not silently pair it with the default of the
// other while a weaker source gave that other one.
struct AliasOrigins {
    std::string hosts[2], ports[2];
};

// Checks one source's settings and applies them to `cfg`, over what weaker sources set; throws
// Failure on a bad value.
void apply(const Source& src, const std::vector<RawSetting>& settings, Config& cfg,
           AliasOrigins& origins);

// --host: an IPv4 or IPv6 address (brackets allowed and dropped) or a host name; --port-file:
// a file that can be written once listening (checked now, before anything starts).
void check_host_and_port_file(Config& cfg);

}  // namespace pdr::config::detail
