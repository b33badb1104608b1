#pragma once
// Internal to pdr::config: the option table shared by the flag parser, the config-file loader and
// the help text. Not for use outside config/.
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>
#include "config/role.hpp"

#include "config/config.hpp"

namespace pdr::config::detail {

enum class Kind {
    Text,          // any string
    NonEmptyText,  // a non-empty string
    Number,        // integer in [min, max], stored in one of the numeric members
    SetTrue,       // no value on the command line: sets `flag` to true (file: a boolean)
    SetFalse,      // no value on the command line: sets `flag` to false (file: a boolean, inverted)
    Instances,     // list of HOST:PORT
    AliasHosts,    // vLLM toy-proxy host list, zipped with AliasPorts of the same role
    AliasPorts,
    LogLevel,
    LogFormat,
    OnMissingKv,
    RewriteKvHost,
    PassThroughRole,
    KvMode,
    OnKvReadyTimeout,
    LmcachePorts,      // per decode instance, one comma list per instance; `init` picks the list
    LmcacheHosts,      // per decode instance: the receiver host
    KvReadyCounts,     // per prefill instance: notifications to wait for (0 = D's TP size)
    EngineIds,         // per prefill instance: push-mode engine ids (`texts`)
    KvHosts,           // per prefill instance: push-mode KV side-channel hosts (`texts`)
    SideChannelPorts,  // per prefill instance (or one for all): side-channel ports
    ConfigFile,        // --config (command line only)
    Help,              // command line only
    Version,           // command line only
    // command line only: check everything, print "configuration OK", exit 0
    CheckConfig,
    Policy,       // --prefill-policy / --decode-policy (`role`)
    DnsTarget,    // --prefill-dns / --decode-dns / --peer-routers-dns NAME:PORT (`address`)
    PeerRouters,  // --peer-routers: list of HOST:PORT
    AllowList,    // --instance-allow CIDR|ADDR|NAME ... (`texts`)
};

using ::pdr::Role;

struct Option {
    std::string_view name;  // long flag without the dashes, e.g. "connect-timeout-ms"
    Kind kind;
    std::string_view meta;  // value placeholder in --help; empty for flags without a value
    std::string_view help;  // one line; mentions the default
    std::string Config::*text = nullptr;
    std::vector<std::string> Config::*texts = nullptr;
    unsigned short Config::*port = nullptr;
    Duration Config::*millis = nullptr;
    std::size_t Config::*size = nullptr;
    int Config::*count = nullptr;
    bool Config::*flag = nullptr;
    InstanceAddress Config::*address = nullptr;
    std::uint64_t min = 0;
    std::uint64_t max = 0;
    Role role = Role::Prefill;
    bool init = false;            // LmcachePorts: the init ports (else the alloc ports)
    bool in_file = true;          // valid as a config-file key
    std::string_view group = {};  // starts a new section in --help when not empty
};

std::span<const Option> options();
// By long flag name ("connect-timeout-ms"); nullptr when unknown.
const Option* find_option(std::string_view name);

// True for kinds that take a list of values after one flag.
inline bool is_list(Kind k) {
    return k == Kind::Instances || k == Kind::AliasHosts || k == Kind::AliasPorts ||
           k == Kind::LmcachePorts || k == Kind::LmcacheHosts || k == Kind::KvReadyCounts ||
           k == Kind::EngineIds || k == Kind::KvHosts || k == Kind::SideChannelPorts ||
           k == Kind::PeerRouters || k == Kind::AllowList;
}
// True for kinds that take no value on the command line.
inline bool is_switch(Kind k) {
    return k == Kind::SetTrue || k == Kind::SetFalse || k == Kind::Help || k == Kind::Version ||
           k == Kind::CheckConfig;
}

// One setting as found in one source, before validation.
struct RawSetting {
    const Option* option = nullptr;
    std::string given;                // as the user wrote it: "port" (file), "port" (flag), ...
    std::vector<std::string> values;  // one for scalars; list kinds may have several
};

// Reads a JSON or YAML config file into settings (keys mapped to options). On failure returns
// false and sets `error` to one line naming the file (and key, where there is one).
bool load_config_file(const std::string& path, std::vector<RawSetting>& out, std::string& error);

}  // namespace pdr::config::detail
