// libFuzzer target for the command line: the input split at NUL bytes into argv (after
// "pdrouter"), parsed by parse_command_line with an empty environment. An outcome is either a
// configuration to run or an exit with one message ending in a newline. Build and run:
// scripts/fuzz flags SECONDS. Seeds: corpus/flags/ (arguments separated by NUL bytes).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "config/config.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    std::vector<std::string> args{"pdrouter"};
    std::string cur;
    for (std::size_t i = 0; i < size; ++i) {
        if (data[i] == 0) {
            args.push_back(std::move(cur));
            cur.clear();
        } else {
            cur.push_back(static_cast<char>(data[i]));
        }
    }
    if (!cur.empty()) {
        args.push_back(std::move(cur));
    }
    for (const std::string& a : args) {
        // A config file would be read from this machine: the config_file target covers it.
        if (a.starts_with("--config") || a.starts_with("--dns-hosts")) {
            return 0;
        }
    }
    std::vector<const char*> argv;
    for (const std::string& a : args) {
        argv.push_back(a.c_str());
    }
    argv.push_back(nullptr);
    const auto no_env = [](const char*) -> const char* { return nullptr; };
    const pdr::config::ParseOutcome out =
        pdr::config::parse_command_line(static_cast<int>(args.size()), argv.data(), no_env);
    if (out.action == pdr::config::ParseOutcome::Action::Exit &&
        (out.output.empty() || out.output.back() != '\n')) {
        std::abort();
    }
    return 0;
}
