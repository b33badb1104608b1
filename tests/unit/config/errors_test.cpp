// Every class of configuration error: Exit, status 2, one line naming the key and the value.
#include <gtest/gtest.h>

#include "tests/unit/config/config_test_util.hpp"

namespace pdr::config::test {
namespace {

TEST(ConfigErrors, UnknownFlagsAndStrayArguments) {
    expect_error(parse(with_instances({"--bogus"})),
                 "pdrouter: unknown option '--bogus' (see --help)");
    expect_error(parse(with_instances({"--bogus=1"})),
                 "pdrouter: unknown option '--bogus' (see --help)");
    expect_error(parse(with_instances({"-x"})), "pdrouter: unknown option '-x' (see --help)");
    expect_error(parse(with_instances({"-sk-SECRET"})),
                 "pdrouter: unknown option at argument #5: options start with '--' (see --help)");
    expect_error(parse({"stray", "--prefill", "a:1", "--decode", "b:2"}),
                 "pdrouter: unexpected argument #1: not an option (see --help)");
    expect_error(parse(with_instances({"--port", "1", "stray"})),
                 "pdrouter: unexpected argument #7: --port takes one value (see --help)");
    expect_error(parse(with_instances({"--demo", "stray"})),
                 "pdrouter: unexpected argument #6: --demo takes no value (see --help)");
    expect_error(parse(with_instances({"--port=1", "stray"})),
                 "pdrouter: unexpected argument #6: --port took its value after '=' (see --help)");
    expect_error(parse(with_instances({"--"})), "pdrouter: unexpected argument '--' (see --help)");
    expect_error(parse(with_instances({"--help=1"})), "pdrouter: --help takes no value");
}

TEST(ConfigErrors, MissingValues) {
    expect_error(parse(with_instances({"--port"})), "pdrouter: missing value for --port");
    expect_error(parse(with_instances({"--model", "--port", "1"})),
                 "pdrouter: missing value for --model");
    expect_error(parse({"--prefill", "--decode", "a:1"}), "pdrouter: missing value for --prefill");
    expect_error(parse(with_instances({"--config"})), "pdrouter: missing value for --config");
    expect_error(parse(with_instances({"--config="})), "pdrouter: missing value for --config");
}

TEST(ConfigErrors, NonNumericAndOutOfRange) {
    expect_error(parse(with_instances({"--port", "abc"})),
                 "pdrouter: invalid value for --port: expected an integer 0..65535");
    expect_error(parse(with_instances({"--port=65536"})),
                 "pdrouter: invalid value for --port: expected an integer 0..65535");
    expect_error(parse(with_instances({"--port", "-1"})),
                 "pdrouter: invalid value for --port: expected an integer 0..65535");
    expect_error(parse(with_instances({"--port", "80 "})),
                 "pdrouter: invalid value for --port: expected an integer 0..65535");
    expect_error(parse(with_instances({"--connect-timeout-ms", "0"})),
                 "pdrouter: invalid value for --connect-timeout-ms: expected an integer "
                 "1..2147483647 (milliseconds)");
    expect_error(parse(with_instances({"--kv-lease-timeout-ms", "1.5"})),
                 "pdrouter: invalid value for --kv-lease-timeout-ms: expected an integer "
                 "100..2147483647 (milliseconds)");
    // A lease under 100 ms would make the lease keeper hammer prefills with refreshes.
    expect_error(parse(with_instances({"--kv-lease-timeout-ms", "99"})),
                 "pdrouter: invalid value for --kv-lease-timeout-ms: expected an integer "
                 "100..2147483647 (milliseconds)");
    // Bodies are buffered in memory: the limit is capped at 1 GiB.
    expect_error(parse(with_instances({"--max-body-bytes", "1073741825"})),
                 "pdrouter: invalid value for --max-body-bytes: expected an integer "
                 "1..1073741824 (bytes)");
    expect_error(parse(with_instances({"--demo-token-delay-ms", "60001"})),
                 "pdrouter: invalid value for --demo-token-delay-ms: expected an integer "
                 "0..60000 (milliseconds)");
    expect_error(parse(with_instances({"--max-body-bytes", "0"})),
                 "pdrouter: invalid value for --max-body-bytes: expected an integer "
                 "1..1073741824 (bytes)");
    expect_error(parse(with_instances({"--max-concurrent-requests", "99999999999999999999999"})),
                 "pdrouter: invalid value for "
                 "--max-concurrent-requests: expected an integer 1..1000000");
    expect_error(parse(with_instances({"--prefill-retries", "11"})),
                 "pdrouter: invalid value for --prefill-retries: expected an integer 0..10");
    for (const char* flag :
         {"--prefill-timeout-ms", "--decode-timeout-ms", "--decode-idle-timeout-ms",
          "--request-read-timeout-ms", "--client-idle-timeout-ms", "--upstream-idle-timeout-ms",
          "--health-interval-ms", "--health-backoff-max-ms"}) {
        auto r = parse(with_instances({flag, "0"}));
        EXPECT_EQ(r.exit_code, 2) << flag;
        EXPECT_NE(r.output.find(std::string("invalid value for ") + flag), std::string::npos)
            << r.output;
    }
    for (const char* flag : {"--max-header-bytes", "--decode-retries", "--demo-token-delay-ms"}) {
        auto r = parse(with_instances({flag, "x"}));
        EXPECT_EQ(r.exit_code, 2) << flag;
        EXPECT_NE(r.output.find(std::string("invalid value for ") + flag), std::string::npos)
            << r.output;
    }
}

TEST(ConfigErrors, BadEnumsAndBooleans) {
    expect_error(parse(with_instances({"--log-level", "loud"})),
                 "pdrouter: invalid value for --log-level: expected one of debug, info, "
                 "warn, error");
    expect_error(parse(with_instances({"--log-format=xml"})),
                 "pdrouter: invalid value for --log-format: expected one of text, json");
    expect_error(parse(with_instances({"--on-missing-kv-params", "ignore"})),
                 "pdrouter: invalid value for --on-missing-kv-params: expected one of "
                 "error, recompute");
    expect_error(parse(with_instances({"--rewrite-kv-host", "sometimes"})),
                 "pdrouter: invalid value for --rewrite-kv-host: expected one of auto, never, "
                 "always");
    expect_error(parse(with_instances({"--pass-through-role", "both"})),
                 "pdrouter: invalid value for --pass-through-role: expected decode or prefill");
    expect_error(parse(with_instances({"--kv-mode", "nixl"})),
                 "pdrouter: invalid value for --kv-mode: expected pull, push or lmcache");
    expect_error(parse(with_instances({"--demo=maybe"})),
                 "pdrouter: invalid value for --demo: expected true or false (also yes/no, "
                 "on/off, 1/0)");
    expect_error(parse(with_instances({"--host="})),
                 "pdrouter: empty value for --host: expected a non-empty string");
}

TEST(ConfigErrors, BadInstances) {
    expect_error(parse({"--prefill", "nohost", "--decode", "d:1"}),
                 "pdrouter: invalid value for --prefill: missing port (expected "
                 "HOST:PORT, http://HOST:PORT or [IPv6]:PORT)");
    expect_error(parse({"--prefill", "a:1", "--decode", "::1:80"}),
                 "pdrouter: invalid value for --decode: an IPv6 address needs brackets, "
                 "e.g. [::1]:8100");
    expect_error(parse({"--prefill", "a:1,,b:2", "--decode", "d:1"}),
                 "pdrouter: invalid value for --prefill: empty list item");
    expect_error(parse({"--prefill", "a:1", "http://a:1/", "--decode", "d:1"}),
                 "pdrouter: duplicate prefill instance 'a:1' in --prefill");
    expect_error(parse({"--prefill", "a:1", "--decode", "d:1", "--decode", "D:1"}),
                 "pdrouter: duplicate decode instance 'd:1' in --decode");
    // The same address in both roles is allowed (one instance serving both).
    EXPECT_EQ(parse({"--prefill", "a:1", "--decode", "a:1"}).action, ParseOutcome::Action::Run);
}

TEST(ConfigErrors, BadToyProxyAliases) {
    expect_error(
        parse({"--prefiller-hosts", "a", "b", "--prefiller-ports", "1", "--decode", "d:1"}),
        "pdrouter: 2 prefiller host(s) but 1 prefiller port(s) (--prefiller-hosts, "
        "--prefiller-ports): hosts and ports are paired one to one");
    expect_error(parse({"--prefill", "a:1", "--decoder-ports", "1", "2"}),
                 "pdrouter: 1 decoder host(s) but 2 decoder port(s) (default, --decoder-ports): "
                 "hosts and ports are paired one to one");
    expect_error(parse({"--prefiller-port", "x", "--decode", "d:1"}),
                 "pdrouter: invalid value for --prefiller-port: expected an integer 1..65535");
    expect_error(parse({"--prefiller-host", "a/b", "--decode", "d:1"}),
                 "pdrouter: invalid value for --prefiller-host: expected a host name or "
                 "address only (no scheme, path or port: the port goes in --prefiller-ports)");
    expect_error(parse({"--prefiller-host", "a:5", "--decode", "d:1"}),
                 "pdrouter: invalid value for --prefiller-host: expected a host name or "
                 "address only (no scheme, path or port: the port goes in --prefiller-ports)");
    auto v6 = parse({"--prefiller-host", "[::1]", "--prefiller-port", "5", "--decode", "d:1"});
    ASSERT_EQ(v6.exit_code, 0) << v6.output;
    ASSERT_EQ(v6.config.prefill.size(), 1u);
    EXPECT_EQ(v6.config.prefill[0].text(), "[::1]:5");
    expect_error(
        parse({"--prefiller-host", "a", "a", "--prefiller-port", "1", "1", "--decode", "d:1"}),
        "pdrouter: duplicate prefill instance 'a:1' in --prefiller-host");
}

TEST(ConfigErrors, NoInstancesWithoutDemo) {
    expect_error(parse({}),
                 "pdrouter: no prefill instance configured (use --prefill HOST:PORT, --prefill-dns "
                 "NAME:PORT, or --demo)");
    expect_error(parse({"--prefill", "a:1"}),
                 "pdrouter: no decode instance configured (use --decode HOST:PORT, --decode-dns "
                 "NAME:PORT, or --demo)");
}

// Checks that a config file holding `text` is refused as malformed, in one line; returns it.
std::string malformed_file_error(const std::string& suffix, const std::string& text) {
    TempFile f(suffix, text);
    auto r = parse(with_instances({"--config", f.path()}));
    EXPECT_EQ(r.exit_code, 2) << text << r.output;
    EXPECT_EQ(r.output.rfind("pdrouter: malformed config file '" + f.path() + "': ", 0), 0u)
        << r.output;
    EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
    return r.output;
}

// A config file's values may be secrets (upstream_api_key): an error names the place, never
// the bytes read there.
TEST(ConfigErrors, MalformedJsonDoesNotEchoValues) {
    for (const std::string text : {
             "{\"upstream_api_key\": \"UPSTREAMSECRET-abc",
             "{\"upstream_api_key\": \"UPSTREAMSECRET-abc\n\"}",
             "{\"upstream_api_key\": \"UPSTREAMSECRET\\x\"}",
             "{\"upstream_api_key\": UPSTREAMSECRET}",
             "{\"port\": 1e99999, \"upstream_api_key\": \"UPSTREAMSECRET\"}",
         }) {
        const std::string out = malformed_file_error(".json", text);
        EXPECT_EQ(out.find("SECRET"), std::string::npos) << out;
        EXPECT_EQ(out.find("99999"), std::string::npos) << out;
    }
}

// A refused value is never in the message (a key pasted into the wrong flag would reach the
// logs): not a number, not an address, not a list item, not a host, not a bind address.
TEST(ConfigErrors, RefusedValuesAreNeverEchoed) {
    const std::string secret = "sk-UPSTREAMSECRET";
    const std::vector<std::vector<std::string>> cases = {
        {"--port", secret},
        {"--connect-timeout-ms", secret},
        {"--log-level", secret},
        {"--prefill", secret},
        {"--decode", "10.0.0.1:1," + secret + ":80x"},
        {"--decode", "[" + secret + "]:80"},
        {"--prefiller-hosts", "a/" + secret, "--prefiller-ports", "1"},
        {"--host", secret + "/x"},
        {"--port-file", "/nonexistent-dir/" + secret},
        {"--kv-mode", "lmcache", "--kv-ready-bind", "udp://" + secret + ":1"},
        {"--kv-mode", "lmcache", "--kv-ready-bind", "tcp://127.0.0.1:1", "--lmcache-init-ports",
         "8300," + secret},
        {"--upstream-api-key=", secret},
        {"-" + secret},
        {"--kv-mode", "push", "--prefill", "127.0.0.1:8101", "--prefill-engine-ids", secret,
         secret},
    };
    for (const auto& args : cases) {
        const auto r = parse(with_instances(args));
        EXPECT_EQ(r.exit_code, 2) << args.front() << ": " << r.output;
        EXPECT_EQ(r.output.find("SECRET"), std::string::npos) << r.output;
        EXPECT_NE(r.output.find("pdrouter: "), std::string::npos) << r.output;
    }
}

// A quoted YAML value that is never closed ran on (yaml-cpp, which read config files before,
// swallowed the next line, a key, into the value). A quoted value must end on its line.
TEST(ConfigErrors, YamlQuoteThatDoesNotEndOnItsLine) {
    for (const std::string text : {
             "model: \"qwen\nport: 9100\n",
             "model: 'qwen\nport: 9100\n",
             "port: 9100\nmodel: \"qwen\n  host: x\"\n",
             "prefill: [\"a:1\", 'b:2\n  ]\n",
             "\"model\nport\": 9100\n",
             "model: \"qw\\\nen\"\n",
         }) {
        malformed_file_error(".yaml", text);
    }
    // quotes and escapes that end on their line
    TempFile ok(".yaml",
                "model: \"q\\\"w'en\" # a comment\nupstream_api_key: 'it''s'\n"
                "prefill: [\"10.0.0.1:1\", '10.0.0.2:2']\n\"port\": \"9100\"\n");
    auto r = parse(with_instances({"--config", ok.path()}));
    ASSERT_EQ(r.action, ParseOutcome::Action::Run) << r.output;
    EXPECT_EQ(r.config.model, "q\"w'en");
    EXPECT_EQ(r.config.upstream_api_key, "it's");
    EXPECT_EQ(r.config.port, 9100);
}

// The YAML a config file may hold is read by config/yaml_subset.cpp. yaml-cpp 0.7, which read
// it before, ran for seconds into std::bad_alloc on these inputs (found by fuzzing): each is
// now refused at once, naming its line.
TEST(ConfigErrors, YamlThatIsNotAConfigFileIsRefusedNamingTheLine) {
    const std::string fuzzed =
        "# pdrouter cmnfiguration example (topped readi{\n"
        "  \"h000,127.0.0.1\x1a"
        "8100\", \"1h27\n"
        "  ener -----------------: 4onnections this lon"
        "------------------------------------------------- error\n"
        "log_format: t\n";
    std::string out = malformed_file_error(".yaml", fuzzed);
    EXPECT_NE(out.find("line 2: a quoted key without ':' after it"), std::string::npos) << out;
    out = malformed_file_error(".yaml", "&:, ");
    EXPECT_NE(out.find("line 1: a key that is not a plain or quoted string"), std::string::npos)
        << out;
    {
        TempFile f(".yaml", ",/& :");  // a key, unknown
        const auto r = parse(with_instances({"--config", f.path()}));
        EXPECT_EQ(r.exit_code, 2);
        EXPECT_NE(r.output.find("unknown key ',/&'"), std::string::npos) << r.output;
    }
    malformed_file_error(".yaml", "  \"h0@00,127.0.0\", ---stream-api-key\"--\nport: 1\n");
    // Values are one line: quotes and '[' lists end on theirs, nothing but a comment follows.
    out = malformed_file_error(".yaml", "model: m\nport: \"9100\n");
    EXPECT_NE(out.find("line 2: a quoted value that does not end on its line"), std::string::npos)
        << out;
    out = malformed_file_error(".yaml", "port: 9100\nprefill: [\"a:1\",\n  \"b:2\"]\n");
    EXPECT_NE(out.find("line 2: a '[' list that does not close on its line"), std::string::npos)
        << out;
    out = malformed_file_error(".yaml", "model: 'a' b\n");
    EXPECT_NE(out.find("line 1: text after a quoted value"), std::string::npos) << out;
    out = malformed_file_error(".yaml", "port: 1\nmodel: qwen\n  continued\n");
    EXPECT_NE(out.find("line 3: more indented than the keys above it"), std::string::npos) << out;
    out = malformed_file_error(".yaml", "model: a: b\n");
    EXPECT_NE(out.find("line 1: ': ' inside a plain value (quote the value)"), std::string::npos)
        << out;
    // Anchors, aliases, tags, block scalars, directives, flow mappings: refused.
    out = malformed_file_error(".yaml", "port: 1\nmodel: *m\n");
    EXPECT_NE(out.find("line 2: '*' where a value starts"), std::string::npos) << out;
    for (const std::string text :
         {"port: !!int 9100\n", "model: |\n  m\n", "model: >\n  m\n", "%YAML 1.2\n---\nport: 1\n",
          "{port: 9100, model: m}\n", "\tport: 1\n", "port: 1\n...\nmodel: m\n",
          "prefill: [a, [b]]\n", "model: \"\\q\"\n"}) {
        malformed_file_error(".yaml", text);
    }
    // What a config file does use: comments anywhere, quotes with escapes, lists both ways,
    // brackets and quotes inside plain values, "---" at the start and "..." at the end.
    TempFile ok(".yaml",
                "---  # the only document\n"
                "prefill: [\"10.0.0.1:1\", '10.0.0.2:2', 10.0.0.3:3,] # [ a comment\n"
                "decode:\n"
                "- d1:1   # a comment\n"
                "- \"d2:2\"\n"
                "model: it's-a[1]{x} \"y\"\n"
                "upstream_api_key: \"ab\\u00e9\\\"c\\\\d\"\n"
                "\"port\": 9100\n"
                "...\n");
    auto r = parse({"--config", ok.path()});
    ASSERT_EQ(r.action, ParseOutcome::Action::Run) << r.output;
    EXPECT_EQ(texts(r.config.prefill),
              (std::vector<std::string>{"10.0.0.1:1", "10.0.0.2:2", "10.0.0.3:3"}));
    EXPECT_EQ(texts(r.config.decode), (std::vector<std::string>{"d1:1", "d2:2"}));
    EXPECT_EQ(r.config.model, "it's-a[1]{x} \"y\"");
    EXPECT_EQ(r.config.upstream_api_key, "ab\xc3\xa9\"c\\d");
    EXPECT_EQ(r.config.port, 9100);
}

TEST(ConfigErrors, ConfigFileProblems) {
    expect_error(parse(with_instances({"--config", "/nonexistent/pdr.yaml"})),
                 "pdrouter: cannot read config file '/nonexistent/pdr.yaml': No such file or "
                 "directory");
    expect_error(parse(with_instances({"--config", "/tmp"})),
                 "pdrouter: cannot read config file '/tmp': it is a directory");

    TempFile bad_json(".json", "{\"port\": 1,,}");
    auto r = parse(with_instances({"--config", bad_json.path()}));
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_EQ(r.output.rfind("pdrouter: malformed config file '" + bad_json.path() + "': ", 0), 0u)
        << r.output;
    EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;

    TempFile bad_yaml(".yaml", "port: [1\nhost: x\n");
    r = parse(with_instances({"--config", bad_yaml.path()}));
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_EQ(r.output.rfind("pdrouter: malformed config file '" + bad_yaml.path() + "': ", 0), 0u)
        << r.output;
    EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;

    TempFile list_yaml(".yaml", "- a\n- b\n");
    expect_error(
        parse(with_instances({"--config", list_yaml.path()})),
        "pdrouter: config file '" + list_yaml.path() + "' must hold one mapping of keys to values");
    TempFile list_json(".json", "[1]");
    expect_error(
        parse(with_instances({"--config", list_json.path()})),
        "pdrouter: config file '" + list_json.path() + "' must hold one object of keys to values");
}

TEST(ConfigErrors, ConfigFileKeysAndValues) {
    TempFile unknown(".yaml", "port: 1\ncolour: blue\n");
    expect_error(parse(with_instances({"--config", unknown.path()})),
                 "pdrouter: unknown key 'colour' in config file '" + unknown.path() + "'");
    TempFile flag_only(".json", R"({"config": "other.yaml"})");
    expect_error(parse(with_instances({"--config", flag_only.path()})),
                 "pdrouter: unknown key 'config' in config file '" + flag_only.path() + "'");
    TempFile dup(".yaml", "port: 1\nport: 2\n");
    auto r = parse(with_instances({"--config", dup.path()}));
    EXPECT_EQ(r.exit_code, 2) << r.output;
    TempFile dup_dash(".yaml", "max_body_bytes: 1\nmax-body-bytes: 2\n");
    expect_error(
        parse(with_instances({"--config", dup_dash.path()})),
        "pdrouter: duplicate key 'max-body-bytes' in config file '" + dup_dash.path() + "'");
    TempFile dup_json(".json", R"({"port": 1, "log_level": "info", "port": 2})");
    expect_error(parse(with_instances({"--config", dup_json.path()})),
                 "pdrouter: duplicate key 'port' in config file '" + dup_json.path() + "'");
    // a key repeated only inside a nested object is not a repeated top-level key
    TempFile nested(".json", R"({"port": 3, "extra": {"port": 1}})");
    expect_error(parse(with_instances({"--config", nested.path()})),
                 "pdrouter: unknown key 'extra' in config file '" + nested.path() + "'");
    TempFile bad_port(".json", R"({"port": "abc"})");
    expect_error(parse(with_instances({"--config", bad_port.path()})),
                 "pdrouter: invalid value for key 'port' in config file '" + bad_port.path() +
                     "': expected an integer 0..65535");
    TempFile float_ms(".json", R"({"connect_timeout_ms": 1.5})");
    expect_error(parse(with_instances({"--config", float_ms.path()})),
                 "pdrouter: invalid value for key 'connect_timeout_ms' in config file '" +
                     float_ms.path() + "': expected an integer 1..2147483647 (milliseconds)");
    TempFile list_for_scalar(".yaml", "port: [1, 2]\n");
    expect_error(parse(with_instances({"--config", list_for_scalar.path()})),
                 "pdrouter: invalid value for key 'port' in config file '" +
                     list_for_scalar.path() + "': expected a single value, not a list");
    TempFile null_value(".yaml", "model:\n");
    expect_error(parse(with_instances({"--config", null_value.path()})),
                 "pdrouter: invalid value for key 'model' in config file '" + null_value.path() +
                     "': expected a value, got null");
    TempFile map_value(".yaml", "model:\n  name: x\n");
    expect_error(parse(with_instances({"--config", map_value.path()})),
                 "pdrouter: invalid value for key 'model' in config file '" + map_value.path() +
                     "': expected a value, not a mapping");
    TempFile object_json(".json", R"({"model": {"a": 1}})");
    expect_error(parse(with_instances({"--config", object_json.path()})),
                 "pdrouter: invalid value for key 'model' in config file '" + object_json.path() +
                     "': expected a string, number or boolean");
    TempFile bad_instance(".yaml", "prefill: [a:1, nope]\ndecode: d:1\n");
    expect_error(parse({"--config", bad_instance.path()}),
                 "pdrouter: invalid value for key 'prefill' in config file '" +
                     bad_instance.path() +
                     "': missing port (expected HOST:PORT, http://HOST:PORT or [IPv6]:PORT)");
    TempFile dup_instance(".json", R"({"prefill": ["a:1", "a:1"], "decode": "d:1"})");
    expect_error(parse({"--config", dup_instance.path()}),
                 "pdrouter: duplicate prefill instance 'a:1' in key 'prefill' in config file '" +
                     dup_instance.path() + "'");
    TempFile bad_bool(".yaml", "no_lease_refresh: sometimes\n");
    expect_error(parse(with_instances({"--config", bad_bool.path()})),
                 "pdrouter: invalid value for key 'no_lease_refresh' in config file '" +
                     bad_bool.path() + "': expected true or false (also yes/no, on/off, 1/0)");
}

TEST(ConfigErrors, ErrorsLeaveNoPartialConfig) {
    auto r = parse({"--port", "1234", "--bogus"});
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_EQ(r.config.port, 8000);  // reset to defaults: nothing half-applied escapes
}

}  // namespace
}  // namespace pdr::config::test
