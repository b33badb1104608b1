// libFuzzer target for the config file: the input is written to a file (JSON when it starts
// with '{' after whitespace, else YAML, as the loader decides by content) and read by
// `pdrouter --config FILE --check-config`'s parser, parse_command_line, which loads it and
// applies every setting. A refusal is one line, and never echoes a secret (issue 19 §1.15's rule,
// checked here for the secret seeded in the corpus; see leaks_secret).
// Build and run: scripts/fuzz config_file SECONDS. Seeds: corpus/config_file/.
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>
#include <utility>

#include "config/config.hpp"

namespace {

// One file per fuzzing process, rewritten for each input (tmpfs when there is one).
const std::string& scratch_path() {
    static const std::string path = [] {
        const char* dir = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
        return std::string(dir) + "/pdr-config-fuzz-" + std::to_string(getpid()) + ".yaml";
    }();
    return path;
}

// The names a refusal can give a key: every option of --help, spelled with '_' for '-'
// ("admin_api_key"), as leaks_secret looks them up.
const std::set<std::string>& option_names() {
    static const std::set<std::string> names = [] {
        std::set<std::string> out;
        const std::string help = pdr::config::help_text();
        for (auto at = help.find("--"); at != std::string::npos; at = help.find("--", at + 2)) {
            const auto end =
                help.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789-", at + 2);
            std::string name = help.substr(at + 2, end - at - 2);
            if (!name.empty()) {
                std::replace(name.begin(), name.end(), '-', '_');
                out.insert(std::move(name));
            }
        }
        return out;
    }();
    return names;
}

// Whether a refusal shows the secret seeded in the corpus (an api key's value). A refusal may
// name an unknown or repeated key, and quote the value of the one key it refuses ("invalid value
// '...' for key 'prefill'"), and the fuzzer copies the secret into such values too: that is allowed
// unless the key holds a secret (its name says key or secret).
bool leaks_secret(const std::string& msg) {
    const auto at = msg.find("UPSTREAMSECRET");
    if (at == std::string::npos) {
        return false;
    }
    // A key's name is no secret: an unknown or repeated key is named ("unknown key 'X' in
    // config file '...'"), and the fuzzer copies the secret into key names too.
    for (const std::string named : {"pdrouter: unknown key '", "pdrouter: duplicate key '"}) {
        const auto end = msg.rfind("' in config file '");
        if (msg.starts_with(named) && end != std::string::npos && named.size() <= at && at < end &&
            msg.find("UPSTREAMSECRET", end) == std::string::npos) {
            return false;
        }
    }
    // "invalid value 'V' for key 'NAME' in config file ...: REASON" or, where the check is the
    // flag's own, "invalid value 'V' for --NAME: REASON". The reason may quote V or a part of it
    // again (a host name, a port), so past the opening everything is V's: allowed when NAME
    // does not hold a secret.
    const std::string opening = "invalid value '";
    const auto v = msg.find(opening);
    if (v == std::string::npos || at < v) {
        return true;
    }
    // The value may itself hold "' for --" (the fuzzer copies the message's own words into it):
    // the key is the first name after such a closing that is an option's name.
    std::string key;
    for (const std::string closing : {"' for key '", "' for --"}) {
        for (auto k = msg.find(closing, v); k != std::string::npos && key.empty();
             k = msg.find(closing, k + 1)) {
            const auto name_at = k + closing.size();
            const std::string name =
                msg.substr(name_at, msg.find_first_of("': ", name_at) - name_at);
            // A file key may mix '-' and '_' ("client_write-timeout_ms"): the loader takes both.
            std::string canonical = name;
            std::replace(canonical.begin(), canonical.end(), '-', '_');
            if (option_names().count(canonical) != 0) {
                key = name;
            }
        }
    }
    return key.empty() || key.find("key") != std::string::npos ||
           key.find("secret") != std::string::npos;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string& path = scratch_path();
    std::FILE* f = std::fopen(path.c_str(), "wb");
    if (f == nullptr) {
        std::abort();
    }
    if (size > 0 && std::fwrite(data, 1, size, f) != size) {
        std::abort();
    }
    std::fclose(f);
    const char* argv[] = {"pdrouter", "--config", path.c_str(), nullptr};
    const auto no_env = [](const char*) -> const char* { return nullptr; };
    const pdr::config::ParseOutcome out = pdr::config::parse_command_line(3, argv, no_env);
    if (out.action == pdr::config::ParseOutcome::Action::Exit && out.exit_code != 0) {
        if (out.output.empty() || out.output.back() != '\n' || leaks_secret(out.output)) {
            std::abort();
        }
    }
    return 0;
}
