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

// One file per fuzzing process, rewritten for each input (tmpfs when there is one). Named
// neither .json nor .yaml: the loader takes such a name at its word, and decides by content
// otherwise, so both parsers get the inputs.
const std::string& scratch_path() {
    static const std::string path = [] {
        const char* dir = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
        return std::string(dir) + "/pdr-config-fuzz-" + std::to_string(getpid()) + ".conf";
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

// Searches of the refusal, made without sanitizer coverage: libFuzzer learns the strings that
// instrumented code compares (its memcmp/strstr hooks feed its dictionary), and a harness that
// looks for "' for key '" in the message teaches the fuzzer to put those words into values,
// which is how it fooled earlier versions of this check. A plain loop is not hooked.
__attribute__((no_sanitize("coverage"))) std::size_t plain_find(const std::string& hay,
                                                                const std::string& needle,
                                                                std::size_t from = 0) {
    for (std::size_t i = from; i + needle.size() <= hay.size(); ++i) {
        std::size_t j = 0;
        while (j < needle.size() && hay[i + j] == needle[j]) {
            ++j;
        }
        if (j == needle.size()) {
            return i;
        }
    }
    return std::string::npos;
}

__attribute__((no_sanitize("coverage"))) std::size_t plain_rfind(const std::string& hay,
                                                                 const std::string& needle,
                                                                 std::size_t before) {
    std::size_t found = std::string::npos;
    for (auto at = plain_find(hay, needle); at != std::string::npos && at < before;
         at = plain_find(hay, needle, at + 1)) {
        found = at;
    }
    return found;
}

bool holds_secret(std::string key) {
    std::replace(key.begin(), key.end(), '-', '_');
    return plain_find(key, "key") != std::string::npos ||
           plain_find(key, "secret") != std::string::npos;
}

// Whether a refusal shows the secret seeded in the corpus (an api key's value). A refusal may
// name an unknown or repeated key, and quote the value of the one key it refuses ("invalid value
// '...' for key 'prefill'"), and the fuzzer copies the secret into such values too: that is allowed
// unless the key holds a secret (its name says key or secret).
__attribute__((no_sanitize("coverage"))) bool leaks_secret(const std::string& msg) {
    const auto at = plain_find(msg, "UPSTREAMSECRET");
    if (at == std::string::npos) {
        return false;
    }
    // The file's own path closes the part of a refusal that the file's text can fill: the
    // fuzzer does not know it (a per-process name, compared only here, without coverage).
    const std::string in_file = "' in config file '" + scratch_path() + "'";
    const auto file_at = plain_find(msg, in_file);
    // A key's name is no secret: an unknown or repeated key is named ("unknown key 'X' in
    // config file '...'"), and the fuzzer copies the secret into key names too.
    for (const std::string named : {"pdrouter: unknown key '", "pdrouter: duplicate key '"}) {
        if (plain_find(msg, named) == 0 && file_at != std::string::npos && named.size() <= at &&
            at < file_at && plain_find(msg, "UPSTREAMSECRET", file_at) == std::string::npos) {
            return false;
        }
    }
    // "invalid value 'V' for key 'NAME' in config file 'PATH': REASON" or, where the check is
    // the flag's own, "invalid value 'V' for --NAME: REASON". The reason may quote V or a part
    // of it again (a host name, a port): past the opening, everything is V's. Allowed when NAME
    // does not hold a secret.
    const std::string opening = "pdrouter: invalid value '";
    if (plain_find(msg, opening) != 0) {
        return true;
    }
    if (file_at != std::string::npos) {
        // NAME is what stands between the last "' for key '" before the path and the path.
        const std::string for_key = "' for key '";
        const auto k = plain_rfind(msg, for_key, file_at);
        if (k == std::string::npos || k < opening.size()) {
            return true;
        }
        return holds_secret(msg.substr(k + for_key.size(), file_at - k - for_key.size()));
    }
    // The flag's own check ("' for --NAME: "), made only for options that hold no secret
    // (--host, --port-file, ...). V may hold the same words with a secret option's name
    // (the fuzzer learns them from the refusals): the refusal is taken as a leak only when
    // no such name in it is a non-secret option's.
    for (auto k = plain_find(msg, "' for --", opening.size()); k != std::string::npos;
         k = plain_find(msg, "' for --", k + 1)) {
        const auto name_at = k + 8;
        auto name_end = name_at;
        while (name_end < msg.size() && msg[name_end] != '\'' && msg[name_end] != ':' &&
               msg[name_end] != ' ') {
            ++name_end;
        }
        std::string name = msg.substr(name_at, name_end - name_at);
        std::replace(name.begin(), name.end(), '-', '_');
        if (option_names().count(name) != 0 && !holds_secret(name)) {
            return false;
        }
    }
    return true;  // no option named, or only secret ones
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
