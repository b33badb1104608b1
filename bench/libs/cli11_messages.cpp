// What CLI11 2.1 says for the command lines of tests/unit/config/errors_test.cpp, beside what
// pdrouter says (the expected text of that test). Not a benchmark: a record of the messages a
// CLI11-based parser would print before any rewriting of them.
// Build and run: bench/libs/run.sh (needs libcli11-dev, which pdrouter itself does not use).
// The options are declared the natural CLI11 way: typed values with CLI::Range / IsMember
// checks, list options taking one or more values, --config through set_config, the
// environment through envname.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

namespace {

struct Case {
    std::vector<const char*> args;
    const char* ours;  // pdrouter's line (tests/unit/config/errors_test.cpp)
};

std::string run(const std::vector<const char*>& args) {
    CLI::App app{"pdrouter", "pdrouter"};
    int port = 8000;
    std::string model, host = "0.0.0.0", log_level = "info";
    std::uint32_t connect_ms = 3000, max_body = 8388608;
    std::string admin_key;
    bool demo = false;
    std::vector<std::string> prefill, decode, prefiller_hosts, prefiller_ports, decoder_ports;
    app.add_option("--host", host);
    app.add_option("--port", port)->check(CLI::Range(0, 65535));
    app.add_option("--model", model);
    app.add_option("--connect-timeout-ms", connect_ms)->check(CLI::Range(1u, 2147483647u));
    app.add_option("--max-body-bytes", max_body)->check(CLI::Range(1u, 1u << 30));
    app.add_option("--log-level", log_level)
        ->check(CLI::IsMember({"debug", "info", "warn", "error"}, CLI::ignore_case));
    app.add_option("--admin-api-key", admin_key)->envname("ADMIN_API_KEY");
    app.add_flag("--demo", demo);
    app.add_option("--prefill", prefill)->expected(1, -1)->delimiter(',');
    app.add_option("--decode", decode)->expected(1, -1)->delimiter(',');
    app.add_option("--prefiller-hosts,--prefiller-host", prefiller_hosts)->expected(1, -1);
    app.add_option("--prefiller-ports,--prefiller-port", prefiller_ports)
        ->expected(1, -1)
        ->check(CLI::Range(1, 65535));
    app.add_option("--decoder-ports,--decoder-port", decoder_ports)->expected(1, -1);
    app.set_config("--config");
    try {
        app.parse(static_cast<int>(args.size()), args.data());
    } catch (const CLI::CallForHelp&) {
        return "(help)";
    } catch (const CLI::ParseError& e) {
        return std::string(e.get_name()) + ": " + e.what();
    }
    std::string prefills;
    for (const auto& p : prefill) {
        prefills += (prefills.empty() ? "" : ", ") + ("'" + p + "'");
    }
    return "(accepted: port " + std::to_string(port) + ", prefill [" + prefills + "])";
}

}  // namespace

int main() {
    // CLI11 2.1 reads TOML/INI config files; pdrouter reads JSON and YAML.
    std::ofstream("/tmp/pdr-cli11-bad-port.ini") << "port=abc\n";
    std::ofstream("/tmp/pdr-cli11-unknown.ini") << "port=1\ncolour=blue\n";
    std::ofstream("/tmp/pdr-cli11.json") << "{\"port\": 1}\n";
    const std::vector<Case> cases = {
        {{"--bogus"}, "pdrouter: unknown option '--bogus' (see --help)"},
        {{"--bogus=1"}, "pdrouter: unknown option '--bogus' (see --help)"},
        {{"-x"}, "pdrouter: unknown option '-x' (see --help)"},
        {{"stray"}, "pdrouter: unexpected argument #1: not an option (see --help)"},
        {{"--port", "1", "stray"},
         "pdrouter: unexpected argument #3: --port takes one value (see --help)"},
        {{"--"}, "pdrouter: unexpected argument '--' (see --help)"},
        {{"--help=1"}, "pdrouter: --help takes no value"},
        {{"--port"}, "pdrouter: missing value for --port"},
        {{"--model", "--port", "1"}, "pdrouter: missing value for --model"},
        {{"--prefill", "--decode", "a:1"}, "pdrouter: missing value for --prefill"},
        {{"--config"}, "pdrouter: missing value for --config"},
        {{"--port", "abc"}, "pdrouter: invalid value for --port: expected an integer 0..65535"},
        {{"--port=65536"}, "pdrouter: invalid value for --port: expected an integer 0..65535"},
        {{"--port", "-1"}, "pdrouter: invalid value for --port: expected an integer 0..65535"},
        {{"--port", "80 "}, "pdrouter: invalid value for --port: expected an integer 0..65535"},
        {{"--connect-timeout-ms", "0"},
         "pdrouter: invalid value for --connect-timeout-ms: expected an integer 1..2147483647 "
         "(milliseconds)"},
        {{"--max-body-bytes", "1073741825"},
         "pdrouter: invalid value for --max-body-bytes: expected an integer "
         "1..1073741824 (bytes)"},
        {{"--log-level", "loud"},
         "pdrouter: invalid value for --log-level: expected one of debug, info, warn, "
         "error"},
        {{"--demo=maybe"},
         "pdrouter: invalid value for --demo: expected true or false (also yes/no, "
         "on/off, 1/0)"},
        {{"--prefiller-port", "x"},
         "pdrouter: invalid value for --prefiller-port: expected an integer 1..65535"},
        {{"--config", "/tmp/pdr-cli11-bad-port.ini"},
         "pdrouter: invalid value for key 'port' in config file "
         "'/tmp/pdr-cli11-bad-port.ini': "
         "expected an integer 0..65535"},
        {{"--config", "/tmp/pdr-cli11-unknown.ini"},
         "pdrouter: unknown key 'colour' in config file '/tmp/pdr-cli11-unknown.ini'"},
        {{"--config", "/tmp/pdr-cli11.json"}, "(accepted: port 1; a JSON file is read as JSON)"},
        {{"--config", "/nonexistent/pdr.yaml"},
         "pdrouter: cannot read config file '/nonexistent/pdr.yaml': No such file or directory"},
    };
    for (const Case& c : cases) {
        std::vector<const char*> argv{"pdrouter"};
        argv.insert(argv.end(), c.args.begin(), c.args.end());
        std::string line;
        for (const char* a : c.args) {
            line += std::string(line.empty() ? "" : " ") + "'" + a + "'";
        }
        std::printf("%s\n  ours:  %s\n  CLI11: %s\n", line.c_str(), c.ours, run(argv).c_str());
    }
}
