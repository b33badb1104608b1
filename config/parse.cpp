// The command line, over a config file, over the environment → Config (each source's settings
// applied by apply.cpp).
#include <cstdlib>

#include "config/apply.hpp"

namespace pdr::config {

namespace {

using detail::AliasOrigins;
using detail::apply;
using detail::check_host_and_port_file;
using detail::fail;
using detail::Failure;
using detail::Kind;
using detail::Option;
using detail::RawSetting;
using detail::Source;

bool starts_with_dash(const char* s) {
    return s[0] == '-' && s[1] != '\0';
}

}  // namespace

ParseOutcome parse_command_line(int argc, const char* const* argv,
                                const std::function<const char*(const char*)>& getenv_fn) {
    ParseOutcome outcome;
    bool check_only = false;  // --check-config
    try {
        std::vector<RawSetting> flags;
        for (int i = 1; i < argc; ++i) {
            std::string_view arg = argv[i];
            if (arg == "-h") {
                arg = "--help";
            }
            if (arg == "--" || !starts_with_dash(argv[i])) {
                fail("pdrouter: unexpected argument '" + std::string(arg) + "' (see --help)");
            }
            if (!arg.starts_with("--")) {
                fail("pdrouter: unknown option '" + std::string(arg) + "' (see --help)");
            }
            std::string_view body = arg.substr(2);
            auto eq = body.find('=');
            std::string name(body.substr(0, eq));
            const Option* o = detail::find_option(name);
            if (o == nullptr) {
                fail("pdrouter: unknown option '--" + name + "' (see --help)");
            }
            RawSetting s{o, name, {}};
            if (eq != std::string_view::npos) {
                if (o->kind == Kind::Help || o->kind == Kind::Version ||
                    o->kind == Kind::CheckConfig) {
                    fail("pdrouter: --" + name + " takes no value");
                }
                s.values.emplace_back(body.substr(eq + 1));
            } else if (is_switch(o->kind)) {
                s.values.emplace_back("true");
            } else if (detail::is_list(o->kind)) {
                while (i + 1 < argc && !starts_with_dash(argv[i + 1])) {
                    s.values.emplace_back(argv[++i]);
                }
            } else if (i + 1 < argc && !std::string_view(argv[i + 1]).starts_with("--")) {
                s.values.emplace_back(argv[++i]);
            }
            if (s.values.empty()) {
                fail("pdrouter: missing value for --" + name);
            }
            if (o->kind == Kind::Help) {
                outcome.action = ParseOutcome::Action::Exit;
                outcome.output = help_text();
                return outcome;
            }
            if (o->kind == Kind::Version) {
                outcome.action = ParseOutcome::Action::Exit;
                outcome.output = version_text();
                return outcome;
            }
            if (o->kind == Kind::CheckConfig) {
                check_only = true;
                continue;
            }
            if (o->kind == Kind::ConfigFile) {
                if (s.values.front().empty()) {
                    fail("pdrouter: missing value for --config");
                }
                outcome.config.config_file = s.values.front();
                continue;
            }
            flags.push_back(std::move(s));
        }

        Config& cfg = outcome.config;
        // Weakest first: environment, then the config file, then flags.
        std::vector<RawSetting> env;
        const std::pair<const char*, const char*> kEnv[] = {{"ADMIN_API_KEY", "admin-api-key"},
                                                            {"OPENAI_API_KEY", "upstream-api-key"}};
        for (const auto& [var, option] : kEnv) {
            const char* v = getenv_fn ? getenv_fn(var) : nullptr;
            if (v != nullptr && *v != '\0') {
                env.push_back({detail::find_option(option), var, {v}});
            }
        }
        AliasOrigins origins;
        apply(Source{Source::Type::Env, {}}, env, cfg, origins);
        if (!cfg.config_file.empty()) {
            std::vector<RawSetting> file;
            std::string error;
            if (!detail::load_config_file(cfg.config_file, file, error)) {
                fail(error);
            }
            apply(Source{Source::Type::File, cfg.config_file}, file, cfg, origins);
        }
        apply(Source{Source::Type::Flags, {}}, flags, cfg, origins);
        check_host_and_port_file(cfg);

        if (!cfg.demo && cfg.prefill.empty()) {
            fail("pdrouter: no prefill instance configured (use --prefill HOST:PORT, or --demo)");
        }
        if (!cfg.demo && cfg.decode.empty()) {
            fail("pdrouter: no decode instance configured (use --decode HOST:PORT, or --demo)");
        }
        if (cfg.demo && (!cfg.prefill.empty() || !cfg.decode.empty())) {
            fail(
                "pdrouter: --demo runs its own prefill and decode instances; drop --prefill/"
                "--decode (and --prefiller-*/--decoder-*), or drop --demo");
        }
    } catch (const Failure& f) {
        outcome.action = ParseOutcome::Action::Exit;
        outcome.exit_code = 2;
        outcome.output = f.message + "\n";
        outcome.config = Config{};
    } catch (const std::exception& e) {  // e.g. out of memory on a huge value
        outcome.action = ParseOutcome::Action::Exit;
        outcome.exit_code = 2;
        outcome.output = std::string("pdrouter: cannot read the configuration: ") + e.what() + "\n";
        outcome.config = Config{};
    }
    if (check_only && outcome.action == ParseOutcome::Action::Run) {
        outcome.action = ParseOutcome::Action::Exit;
        outcome.output = "configuration OK\n";
    }
    return outcome;
}

ParseOutcome parse_command_line(int argc, const char* const* argv) {
    return parse_command_line(argc, argv, [](const char* name) { return std::getenv(name); });
}

}  // namespace pdr::config