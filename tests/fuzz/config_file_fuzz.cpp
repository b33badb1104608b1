// libFuzzer target for the config file: the input is written to a file (JSON when it starts
// with '{' after whitespace, else YAML, as the loader decides by content) and read by
// `pdrouter --config FILE --check-config`'s parser, parse_command_line, which loads it and
// applies every setting. A refusal is one line, and never echoes a value the file holds beyond
// the key (issue 19 §1.15's rule, checked here for the secret seeded in the corpus).
// Build and run: scripts/fuzz config_file SECONDS. Seeds: corpus/config_file/.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

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
        if (out.output.empty() || out.output.back() != '\n' ||
            out.output.find("UPSTREAMSECRET") != std::string::npos) {
            std::abort();
        }
    }
    return 0;
}
