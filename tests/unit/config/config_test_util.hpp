#pragma once
// Helpers for the config tests: run the parser on a list of arguments with an injected
// environment, and write temporary config files.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <map>
#include <string>
#include <vector>

#include "config/config.hpp"

namespace pdr::config::test {

using Env = std::map<std::string, std::string>;

inline ParseOutcome parse(std::vector<std::string> args, const Env& env = {}) {
    args.insert(args.begin(), "pdrouter");
    std::vector<const char*> argv;
    for (const auto& a : args) {
        argv.push_back(a.c_str());
    }
    argv.push_back(nullptr);
    return parse_command_line(static_cast<int>(args.size()), argv.data(),
                              [&env](const char* name) -> const char* {
                                  auto it = env.find(name);
                                  return it == env.end() ? nullptr : it->second.c_str();
                              });
}

// Minimal valid instance flags, for tests about something else.
inline std::vector<std::string> with_instances(std::vector<std::string> args) {
    args.insert(args.begin(), {"--prefill", "127.0.0.1:8100", "--decode", "127.0.0.1:8200"});
    return args;
}

// Asserts an error outcome whose single line is exactly `message`.
inline void expect_error(const ParseOutcome& r, const std::string& message) {
    EXPECT_EQ(r.action, ParseOutcome::Action::Exit);
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_EQ(r.output, message + "\n");
    EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
}

// A temporary file removed when the object goes away.
class TempFile {
public:
    TempFile(const std::string& suffix, const std::string& content) {
        static std::atomic<int> counter{0};
        path_ = (std::filesystem::temp_directory_path() /
                 ("pdr_config_" + std::to_string(::getpid()) + "_" +
                  std::to_string(counter.fetch_add(1)) + suffix))
                    .string();
        std::ofstream(path_) << content;
    }
    ~TempFile() {
        std::error_code ec;
        std::filesystem::remove(path_, ec);
    }
    TempFile(const TempFile&) = delete;
    TempFile& operator=(const TempFile&) = delete;
    const std::string& path() const { return path_; }

private:
    std::string path_;
};

inline std::vector<std::string> texts(const std::vector<InstanceAddress>& v) {
    std::vector<std::string> out;
    for (const auto& a : v) {
        out.push_back(a.text());
    }
    return out;
}

}  // namespace pdr::config::test
