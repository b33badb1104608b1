// Config files: JSON (nlohmann) or YAML (config/yaml_subset.hpp), one mapping of option keys to
// values.
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "config/options.hpp"
#include "config/yaml_subset.hpp"

namespace pdr::config::detail {

namespace {

constexpr std::uintmax_t kMaxConfigFileBytes = 1024 * 1024;

std::string one_line(std::string s) {
    for (char& c : s) {
        if (c == '\n' || c == '\r') {
            c = ' ';
        }
    }
    while (!s.empty() && s.back() == ' ') {
        s.pop_back();
    }
    return s;
}

bool looks_like_json(const std::string& path, const std::string& text) {
    if (path.ends_with(".json")) {
        return true;
    }
    if (path.ends_with(".yaml") || path.ends_with(".yml")) {
        return false;
    }
    auto pos = text.find_first_not_of(" \t\r\n");
    return pos != std::string::npos && text[pos] == '{';
}

// Maps a file key to its option; "connect_timeout_ms" and "connect-timeout-ms" both work.
const Option* option_for_key(const std::string& key) {
    std::string name = key;
    for (char& c : name) {
        if (c == '_') {
            c = '-';
        }
    }
    const Option* o = find_option(name);
    return o != nullptr && o->in_file ? o : nullptr;
}

struct Collector {
    const std::string& path;
    std::vector<RawSetting>& out;
    std::string& error;
    std::set<std::string> seen;

    std::string where(const std::string& key) const {
        return "key '" + key + "' in config file '" + path + "'";
    }
    // Checks the key and starts a setting for it; nullptr (with `error` set) on failure.
    RawSetting* begin(const std::string& key) {
        const Option* o = option_for_key(key);
        if (o == nullptr) {
            error = "pdrouter: unknown key '" + key + "' in config file '" + path + "'";
            return nullptr;
        }
        if (!seen.insert(std::string(o->name)).second) {
            error = "pdrouter: duplicate " + where(key);
            return nullptr;
        }
        out.push_back(RawSetting{o, key, {}});
        return &out.back();
    }
    bool fail(const std::string& key, std::string_view what) {
        error = "pdrouter: invalid value for " + where(key) + ": " + std::string(what);
        return false;
    }
};

bool json_scalar(const nlohmann::json& v, std::string& out) {
    if (v.is_string()) {
        out = v.get<std::string>();
    } else if (v.is_boolean()) {
        out = v.get<bool>() ? "true" : "false";
    } else if (v.is_number()) {
        out = v.dump();
    } else {
        return false;
    }
    return true;
}

// nlohmann's message without what it quotes of the file (a value may be a secret): a syntax
// error's place and kind, less its "; last read: '<bytes>'"; a number too large, unquoted.
std::string json_error_text(const nlohmann::json::exception& e) {
    if (dynamic_cast<const nlohmann::json::parse_error*>(&e) == nullptr) {
        return e.id == 406 ? "a number out of range" : "invalid JSON";  // out_of_range.406
    }
    std::string what = e.what();
    if (auto p = what.find("] "); p != std::string::npos) {
        what = what.substr(p + 2);
    }
    return one_line(what.substr(0, what.find("; last read: ")));
}

bool load_json(const std::string& text, Collector& c) {
    nlohmann::json doc;
    // The parser keeps the last of two equal keys; the callback sees every key first, so a
    // repeated top-level key is refused like in a YAML file.
    std::set<std::string> top_keys;
    std::string repeated;
    auto on_event = [&](int depth, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
        if (depth == 1 && event == nlohmann::json::parse_event_t::key && parsed.is_string() &&
            !top_keys.insert(parsed.get<std::string>()).second && repeated.empty()) {
            repeated = parsed.get<std::string>();
        }
        return true;
    };
    try {
        doc = nlohmann::json::parse(text, on_event);
    } catch (const nlohmann::json::exception& e) {
        c.error = "pdrouter: malformed config file '" + c.path + "': " + json_error_text(e);
        return false;
    }
    if (!doc.is_object()) {
        c.error = "pdrouter: config file '" + c.path + "' must hold one object of keys to values";
        return false;
    }
    if (!repeated.empty()) {
        c.error = "pdrouter: duplicate " + c.where(repeated);
        return false;
    }
    for (const auto& [key, v] : doc.items()) {
        RawSetting* s = c.begin(key);
        if (s == nullptr) {
            return false;
        }
        if (v.is_array()) {
            if (!is_list(s->option->kind)) {
                return c.fail(key, "expected a single value, not a list");
            }
            for (const auto& item : v) {
                std::string text_value;
                if (!json_scalar(item, text_value)) {
                    return c.fail(key, "list items must be strings or numbers");
                }
                s->values.push_back(std::move(text_value));
            }
            continue;
        }
        std::string text_value;
        if (!json_scalar(v, text_value)) {
            return c.fail(key, v.is_null() ? "expected a value, got null"
                                           : "expected a string, number or boolean");
        }
        s->values.push_back(std::move(text_value));
    }
    return true;
}

bool load_yaml(const std::string& text, Collector& c) {
    YamlResult doc = read_yaml_subset(text);
    switch (doc.status) {
        case YamlResult::Status::Ok:
            break;
        case YamlResult::Status::Malformed:
            c.error = "pdrouter: malformed config file '" + c.path + "': " + doc.error;
            return false;
        case YamlResult::Status::NotAMapping:
            c.error =
                "pdrouter: config file '" + c.path + "' must hold one mapping of keys to values";
            return false;
        case YamlResult::Status::Documents:
            c.error = "pdrouter: config file '" + c.path + "' holds " +
                      std::to_string(doc.documents) +
                      " YAML documents; one mapping of keys to values is expected";
            return false;
    }
    for (YamlEntry& e : doc.entries) {
        RawSetting* s = c.begin(e.key);
        if (s == nullptr) {
            return false;
        }
        const bool list = is_list(s->option->kind);
        switch (e.kind) {
            case YamlEntry::Kind::Scalar:
                s->values.push_back(std::move(e.values.front()));
                break;
            case YamlEntry::Kind::List:
                if (!list) {
                    return c.fail(e.key, "expected a single value, not a list");
                }
                for (std::string& v : e.values) {
                    s->values.push_back(std::move(v));
                }
                break;
            case YamlEntry::Kind::ListOfNonScalars:
                return c.fail(e.key, list ? "list items must be strings or numbers"
                                          : "expected a single value, not a list");
            case YamlEntry::Kind::Mapping:
                return c.fail(e.key, "expected a value, not a mapping");
            case YamlEntry::Kind::Null:
                return c.fail(e.key, "expected a value, got null");
        }
    }
    return true;
}

// Well-formed UTF-8 (no overlong forms, no surrogates, nothing above U+10FFFF); the offset of the
// first bad byte, or npos.
std::size_t bad_utf8_at(std::string_view s) {
    std::size_t i = 0;
    while (i < s.size()) {
        const auto b = static_cast<unsigned char>(s[i]);
        std::size_t n = 0;
        unsigned lo = 0x80, hi = 0xBF;
        if (b < 0x80) {
            ++i;
            continue;
        } else if (b >= 0xC2 && b <= 0xDF) {
            n = 1;
        } else if (b >= 0xE0 && b <= 0xEF) {
            n = 2;
            lo = b == 0xE0 ? 0xA0 : 0x80;
            hi = b == 0xED ? 0x9F : 0xBF;
        } else if (b >= 0xF0 && b <= 0xF4) {
            n = 3;
            lo = b == 0xF0 ? 0x90 : 0x80;
            hi = b == 0xF4 ? 0x8F : 0xBF;
        } else {
            return i;
        }
        for (std::size_t k = 1; k <= n; ++k) {
            if (i + k >= s.size()) {
                return i;
            }
            const auto c = static_cast<unsigned char>(s[i + k]);
            if (c < (k == 1 ? lo : 0x80) || c > (k == 1 ? hi : 0xBF)) {
                return i;
            }
        }
        i += n + 1;
    }
    return std::string_view::npos;
}

}  // namespace

bool load_config_file(const std::string& path, std::vector<RawSetting>& out, std::string& error) {
    std::error_code fs_ec;
    if (std::filesystem::is_directory(path, fs_ec)) {
        error = "pdrouter: cannot read config file '" + path + "': it is a directory";
        return false;
    }
    // A config file is small: a device (/dev/zero) or a huge file is a mistake, refused before
    // it is read rather than read until memory runs out.
    const bool regular = std::filesystem::is_regular_file(path, fs_ec);
    if (std::filesystem::exists(path, fs_ec) &&
        (!regular || std::filesystem::file_size(path, fs_ec) > kMaxConfigFileBytes)) {
        error = "pdrouter: cannot read config file '" + path + "': " +
                (regular ? "larger than " + std::to_string(kMaxConfigFileBytes / 1024) + " KiB"
                         : std::string("not a regular file"));
        return false;
    }
    std::ifstream in(path, std::ios::binary);
    if (!in) {
        int err = errno;
        error = "pdrouter: cannot read config file '" + path + "': " + std::strerror(err);
        return false;
    }
    std::ostringstream buf;
    buf << in.rdbuf();
    if (in.bad()) {
        error = "pdrouter: cannot read config file '" + path + "'";
        return false;
    }
    std::string text = buf.str();
    if (text.size() > kMaxConfigFileBytes) {  // grew while being read
        error = "pdrouter: cannot read config file '" + path + "': larger than " +
                std::to_string(kMaxConfigFileBytes / 1024) + " KiB";
        return false;
    }
    if (const auto at = text.find('\0'); at != std::string::npos) {
        error = "pdrouter: config file '" + path + "' holds a NUL byte at offset " +
                std::to_string(at) + " (not a text file)";
        return false;
    }
    if (const auto at = bad_utf8_at(text); at != std::string_view::npos) {
        error = "pdrouter: config file '" + path + "' is not UTF-8 (bad byte at offset " +
                std::to_string(at) + ")";
        return false;
    }
    Collector c{path, out, error, {}};
    return looks_like_json(path, text) ? load_json(text, c) : load_yaml(text, c);
}

}  // namespace pdr::config::detail
