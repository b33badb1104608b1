// Config files (JSON, YAML), environment, and precedence flag > file > env > default.
#include <gtest/gtest.h>

#include "tests/unit/config/config_test_util.hpp"

namespace pdr::config::test {
namespace {

using Strings = std::vector<std::string>;

const char* kJson = R"({
  "host": "127.0.0.1",
  "port": 9100,
  "port_file": "/tmp/port",
  "prefill": ["p1:8100", "http://p2:8101/"],
  "decode": "d1:8200,d2:8201",
  "model": "qwen",
  "admin_api_key": "from-file",
  "connect_timeout_ms": 111,
  "prefill_timeout_ms": "222",
  "decode_timeout_ms": 333,
  "decode_idle_timeout_ms": 444,
  "request_read_timeout_ms": 555,
  "client_idle_timeout_ms": 666,
  "upstream_idle_timeout_ms": 4321,
  "kv_lease_timeout_ms": 777,
  "health_interval_ms": 888,
  "health_backoff_max_ms": 999,
  "max_body_bytes": 1024,
  "max_header_bytes": 2048,
  "max_concurrent_requests": 7,
  "on_missing_kv_params": "recompute",
  "rewrite_kv_host": "never",
  "expose_decode_kv_params": true,
  "prefill_retries": 2,
  "decode_retries": 0,
  "no_lease_refresh": true,
  "log_level": "error",
  "log_format": "json",
  "demo": false,
  "demo_token_delay_ms": 5
})";

void expect_file_values(const Config& c) {
    EXPECT_EQ(c.host, "127.0.0.1");
    EXPECT_EQ(c.port, 9100);
    EXPECT_EQ(c.port_file, "/tmp/port");
    EXPECT_EQ(texts(c.prefill), (Strings{"p1:8100", "p2:8101"}));
    EXPECT_EQ(texts(c.decode), (Strings{"d1:8200", "d2:8201"}));
    EXPECT_EQ(c.model, "qwen");
    EXPECT_EQ(c.admin_api_key, "from-file");
    EXPECT_EQ(c.connect_timeout.count(), 111);
    EXPECT_EQ(c.prefill_timeout.count(), 222);
    EXPECT_EQ(c.decode_timeout.count(), 333);
    EXPECT_EQ(c.decode_idle_timeout.count(), 444);
    EXPECT_EQ(c.request_read_timeout.count(), 555);
    EXPECT_EQ(c.client_idle_timeout.count(), 666);
    EXPECT_EQ(c.upstream_idle_timeout.count(), 4321);
    EXPECT_EQ(c.kv_lease_timeout.count(), 777);
    EXPECT_EQ(c.health_interval.count(), 888);
    EXPECT_EQ(c.health_backoff_max.count(), 999);
    EXPECT_EQ(c.max_body_bytes, 1024u);
    EXPECT_EQ(c.max_header_bytes, 2048u);
    EXPECT_EQ(c.max_concurrent_requests, 7u);
    EXPECT_EQ(c.on_missing_kv_params, OnMissingKvParams::Recompute);
    EXPECT_EQ(c.rewrite_kv_host, RewriteKvHost::Never);
    EXPECT_TRUE(c.expose_decode_kv_params);
    EXPECT_EQ(c.prefill_retries, 2);
    EXPECT_EQ(c.decode_retries, 0);
    EXPECT_FALSE(c.lease_refresh);
    EXPECT_EQ(c.log_level, log::Level::Error);
    EXPECT_EQ(c.log_format, log::Format::Json);
    EXPECT_FALSE(c.demo);
    EXPECT_EQ(c.demo_token_delay.count(), 5);
}

TEST(ConfigFile, JsonEveryKey) {
    TempFile f(".json", kJson);
    auto r = parse({"--config", f.path()});
    ASSERT_EQ(r.action, ParseOutcome::Action::Run) << r.output;
    expect_file_values(r.config);
    EXPECT_EQ(r.config.config_file, f.path());
}

TEST(ConfigFile, YamlEveryKey) {
    TempFile f(".yaml", R"(# comment
host: 127.0.0.1
port: 9100
port_file: /tmp/port
prefill:
  - p1:8100
  - http://p2:8101/
decode: [d1:8200, "d2:8201"]
model: qwen
admin_api_key: from-file
connect_timeout_ms: 111
prefill_timeout_ms: 222
decode_timeout_ms: 333
decode_idle_timeout_ms: 444
request_read_timeout_ms: 555
client_idle_timeout_ms: 666
upstream_idle_timeout_ms: 4321
kv_lease_timeout_ms: 777
health_interval_ms: 888
health_backoff_max_ms: 999
max_body_bytes: 1024
max_header_bytes: 2048
max_concurrent_requests: 7
on_missing_kv_params: recompute
rewrite_kv_host: never
expose_decode_kv_params: yes
prefill_retries: 2
decode_retries: 0
lease_refresh: false
log_level: error
log_format: json
demo: no
demo_token_delay_ms: 5
)");
    auto r = parse({"--config=" + f.path()});
    ASSERT_EQ(r.action, ParseOutcome::Action::Run) << r.output;
    expect_file_values(r.config);
}

TEST(ConfigFile, FormatDetectedByContentWithoutExtension) {
    TempFile json(".conf", R"(  {"prefill": "a:1", "decode": ["b:2"], "port": 1})");
    auto r = parse({"--config", json.path()});
    ASSERT_EQ(r.action, ParseOutcome::Action::Run) << r.output;
    EXPECT_EQ(r.config.port, 1);
    TempFile yaml(".conf", "prefill: a:1\ndecode: b:2\nport: 2\n");
    r = parse({"--config", yaml.path()});
    ASSERT_EQ(r.action, ParseOutcome::Action::Run) << r.output;
    EXPECT_EQ(r.config.port, 2);
    EXPECT_EQ(texts(r.config.decode), Strings{"b:2"});
}

TEST(ConfigFile, DashedKeysAndToyAliasesInFile) {
    TempFile f(".yaml", "prefiller-hosts: [h1, h2]\nprefiller_ports: [1, 2]\ndecoder_port: 3\n");
    auto r = parse({"--config", f.path()});
    ASSERT_EQ(r.action, ParseOutcome::Action::Run) << r.output;
    EXPECT_EQ(texts(r.config.prefill), (Strings{"h1:1", "h2:2"}));
    EXPECT_EQ(texts(r.config.decode), Strings{"localhost:3"});
}

TEST(ConfigFile, EmptyYamlSetsNothing) {
    TempFile f(".yaml", "# nothing here\n");
    auto r = parse(with_instances({"--config", f.path()}));
    ASSERT_EQ(r.action, ParseOutcome::Action::Run) << r.output;
    EXPECT_EQ(r.config.port, 8000);
}

TEST(ConfigFile, OnlyOneSmallUtf8TextDocumentIsRead) {
    auto expect_refused = [](const std::string& path, const std::string& why) {
        auto r = parse(with_instances({"--config", path}));
        EXPECT_EQ(r.exit_code, 2) << path;
        EXPECT_NE(r.output.find(why), std::string::npos) << r.output;
    };
    TempFile multi(".yaml", "port: 8000\n---\nport: 99999\n");
    expect_refused(multi.path(), "holds 2 YAML documents");
    expect_refused("/dev/zero", "not a regular file");
    TempFile nul(".json", std::string("{\"port\": 8000}\0 garbage", 24));
    expect_refused(nul.path(), "NUL byte at offset 14");
    TempFile latin1(".yaml", "model: \"\xff\xfe\"\n");
    expect_refused(latin1.path(), "is not UTF-8 (bad byte at offset 8)");
    TempFile big(".yaml", "# " + std::string(1024 * 1024, 'x') + "\nport: 1\n");
    expect_refused(big.path(), "larger than 1024 KiB");
    TempFile bom(".yaml", "\xef\xbb\xbfport: 8123\n");
    auto ok = parse(with_instances({"--config", bom.path()}));
    ASSERT_EQ(ok.exit_code, 0) << ok.output;
    EXPECT_EQ(ok.config.port, 8123);
}

TEST(ConfigFile, AliasHostsAndPortsMustComeFromOnePlace) {
    TempFile f(".yaml", "prefiller_hosts: [127.0.0.2]\nprefiller_ports: [28111]\n");
    auto r = parse({"--config", f.path(), "--prefiller-ports", "28112", "--decode", "d:1"});
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_NE(r.output.find("--prefiller-ports is given without its hosts"), std::string::npos)
        << r.output;
    auto both = parse({"--config", f.path(), "--prefiller-hosts", "127.0.0.3", "--prefiller-ports",
                       "28112", "--decode", "d:1"});
    ASSERT_EQ(both.exit_code, 0) << both.output;
    EXPECT_EQ(texts(both.config.prefill), Strings{"127.0.0.3:28112"});
    auto file_only = parse({"--config", f.path(), "--decode", "d:1"});
    ASSERT_EQ(file_only.exit_code, 0) << file_only.output;
    EXPECT_EQ(texts(file_only.config.prefill), Strings{"127.0.0.2:28111"});
}

TEST(ConfigPrecedence, FlagBeatsFileBeatsEnvBeatsDefault) {
    TempFile f(".json", R"({"prefill": ["f1:1", "f2:2"], "decode": "fd:3", "port": 9100,
                          "admin_api_key": "file-admin", "log_level": "debug"})");
    Env env{{"ADMIN_API_KEY", "env-admin"}, {"OPENAI_API_KEY", "env-openai"}};
    auto r = parse({"--config", f.path(), "--port", "9200", "--prefill", "c1:1"}, env);
    ASSERT_EQ(r.action, ParseOutcome::Action::Run) << r.output;
    EXPECT_EQ(r.config.port, 9200);                       // flag over file
    EXPECT_EQ(texts(r.config.prefill), Strings{"c1:1"});  // flag list replaces file list
    EXPECT_EQ(texts(r.config.decode), Strings{"fd:3"});   // file over default
    EXPECT_EQ(r.config.admin_api_key, "file-admin");      // file over env
    EXPECT_EQ(r.config.upstream_api_key, "env-openai");   // env over default
    EXPECT_EQ(r.config.log_level, log::Level::Debug);     // file over default
    EXPECT_EQ(r.config.connect_timeout.count(), 3000);    // default
    // Flag over env; the flag may come before --config.
    r = parse({"--admin-api-key", "flag-admin", "--config", f.path(), "--upstream-api-key", "k"},
              env);
    ASSERT_EQ(r.action, ParseOutcome::Action::Run) << r.output;
    EXPECT_EQ(r.config.admin_api_key, "flag-admin");
    EXPECT_EQ(r.config.upstream_api_key, "k");
}

TEST(ConfigEnv, KeysFromEnvironmentOnly) {
    auto r = parse(with_instances({}), {{"ADMIN_API_KEY", "a"}, {"OPENAI_API_KEY", "o"}});
    ASSERT_EQ(r.action, ParseOutcome::Action::Run) << r.output;
    EXPECT_EQ(r.config.admin_api_key, "a");
    EXPECT_EQ(r.config.upstream_api_key, "o");
    // Empty variables count as unset; unrelated variables are ignored.
    r = parse(with_instances({}), {{"ADMIN_API_KEY", ""}, {"PORT", "1"}});
    EXPECT_EQ(r.config.admin_api_key, "");
    EXPECT_EQ(r.config.port, 8000);
}

TEST(ConfigEnv, DefaultOverloadReadsProcessEnvironment) {
    ::setenv("ADMIN_API_KEY", "process-env-key", 1);
    const char* argv[] = {"pdrouter", "--demo", nullptr};
    auto r = parse_command_line(2, argv);
    ::unsetenv("ADMIN_API_KEY");
    ASSERT_EQ(r.action, ParseOutcome::Action::Run) << r.output;
    EXPECT_EQ(r.config.admin_api_key, "process-env-key");
}

}  // namespace
}  // namespace pdr::config::test
