// libFuzzer target for the config file: the input is written to a file (JSON when it starts
// with '{' after whitespace, else YAML, as the loader decides by content) and read by
// `pdrouter --config FILE --check-config`'s parser, parse_command_line, which loads it and
// applies every setting. A refusal is one line, and never echoes a secret (issue 19 §1.15's rule,
// checked here for the secret seeded in the corpus; see leaks_secret).
// Build and run: scripts/fuzz config_file SECONDS. Seeds: corpus/config_file/.
#include <unistd.h>

#include <cctype>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

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

// Whether a refusal shows the secret seeded in the corpus (an api key's value). A refusal never
// quotes a value it refuses: the fuzzer copies the secret into every value, and none of it may
// come back. What a refusal may show: the name of an unknown or repeated key ("unknown key 'X'
// in config file '...'"; a key's name is no secret, and the fuzzer copies the secret into key
// names too), and an instance address that parsed as one (a duplicate instance, two instances
// that share an engine id): host names are lower-cased, so the secret can only come back in an
// IPv6 zone ("[fe80::1%ZONE]:80"), whose case is kept.
__attribute__((no_sanitize("coverage"))) bool leaks_secret(const std::string& msg) {
    const auto at = plain_find(msg, "UPSTREAMSECRET");
    if (at == std::string::npos) {
        return false;
    }
    // The file's own path closes the part of a refusal that the file's text can fill: the
    // fuzzer does not know it (a per-process name, compared only here, without coverage).
    const std::string in_file = "' in config file '" + scratch_path() + "'";
    const auto file_at = plain_find(msg, in_file);
    for (const std::string named : {"pdrouter: unknown key '", "pdrouter: duplicate key '"}) {
        if (plain_find(msg, named) == 0 && file_at != std::string::npos && named.size() <= at &&
            at < file_at && plain_find(msg, "UPSTREAMSECRET", file_at) == std::string::npos) {
            return false;
        }
    }
    // Every occurrence inside an IPv6 zone of a bracketed address, "[<hex, ':' and '.'>%ZONE]:":
    // the address holds a ':', the zone is what canonical_v6 takes, and "]:" follows it.
    for (auto i = at; i != std::string::npos; i = plain_find(msg, "UPSTREAMSECRET", i + 1)) {
        std::size_t pct = i;
        while (pct > 0 && msg[pct - 1] != '%' && msg[pct - 1] != ' ' && msg[pct - 1] != '\'' &&
               msg[pct - 1] != '[' && msg[pct - 1] != ']') {
            --pct;
        }
        if (pct == 0 || msg[pct - 1] != '%') {
            return true;
        }
        std::size_t open = pct - 1;  // the '%'
        while (open > 0 && (std::isxdigit(static_cast<unsigned char>(msg[open - 1])) != 0 ||
                            msg[open - 1] == ':' || msg[open - 1] == '.')) {
            --open;
        }
        // The zone as canonical_v6 takes it: 1..15 letters, digits, '.', '-' or '_', then "]:".
        std::size_t close = pct;
        while (close < msg.size() &&
               (std::isalnum(static_cast<unsigned char>(msg[close])) != 0 || msg[close] == '.' ||
                msg[close] == '-' || msg[close] == '_')) {
            ++close;
        }
        const std::string_view address(msg.data() + open, pct - 1 - open);
        if (open == 0 || msg[open - 1] != '[' || address.find(':') == std::string_view::npos ||
            close - pct > 15 || close + 1 >= msg.size() || msg[close] != ']' ||
            msg[close + 1] != ':') {
            return true;
        }
    }
    return false;
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
