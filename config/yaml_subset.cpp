#include "config/yaml_subset.hpp"

#include <cstdint>

namespace pdr::config::detail {

namespace {

using Kind = YamlEntry::Kind;

bool blank(char c) {
    return c == ' ' || c == '\t';
}

// Characters that start YAML syntax a config value never uses: anchors, aliases, tags, block
// scalars, directives, and the reserved ones.
bool refused_indicator(char c) {
    return c == '&' || c == '*' || c == '!' || c == '|' || c == '>' || c == '%' || c == '@' ||
           c == '`';
}

void append_utf8(std::string& out, std::uint32_t cp) {
    if (cp < 0x80) {
        out += static_cast<char>(cp);
    } else if (cp < 0x800) {
        out += static_cast<char>(0xC0 | (cp >> 6));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        out += static_cast<char>(0xE0 | (cp >> 12));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
        out += static_cast<char>(0xF0 | (cp >> 18));
        out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    }
}

// One line of the file, read left to right. Errors are kept in `error` ("what", no line).
struct Cursor {
    std::string_view s;
    std::size_t i = 0;
    std::string error;

    bool at_end() const { return i >= s.size(); }
    char peek() const { return at_end() ? '\0' : s[i]; }
    void skip_blanks() {
        while (!at_end() && blank(s[i])) {
            ++i;
        }
    }
    // Nothing but blanks and a comment left (a '#' must follow a blank, or start the text).
    bool only_comment_left() {
        skip_blanks();
        return at_end() || (s[i] == '#' && (i == 0 || blank(s[i - 1])));
    }
    bool fail(std::string what) {
        if (error.empty()) {
            error = std::move(what);
        }
        return false;
    }

    bool hex(std::size_t digits, std::uint32_t& cp) {
        cp = 0;
        for (std::size_t k = 0; k < digits; ++k, ++i) {
            const char c = peek();
            int v = -1;
            if (c >= '0' && c <= '9') {
                v = c - '0';
            } else if (c >= 'a' && c <= 'f') {
                v = c - 'a' + 10;
            } else if (c >= 'A' && c <= 'F') {
                v = c - 'A' + 10;
            }
            if (v < 0) {
                return fail("a bad hex escape in a double-quoted value");
            }
            cp = cp * 16 + static_cast<std::uint32_t>(v);
        }
        return true;
    }

    // A quoted scalar starting at s[i] ('...' with '' for a quote, or "..." with escapes).
    bool quoted(std::string& out) {
        const char q = s[i++];
        for (;;) {
            if (at_end()) {
                return fail(
                    "a quoted value that does not end on its line (a missing closing "
                    "quote?)");
            }
            const char c = s[i++];
            if (c == q) {
                if (q == '\'' && peek() == '\'') {
                    out += '\'';
                    ++i;
                    continue;
                }
                return true;
            }
            if (q == '"' && c == '\\') {
                if (at_end()) {
                    return fail(
                        "a quoted value that does not end on its line (a missing "
                        "closing quote?)");
                }
                const char e = s[i++];
                std::uint32_t cp = 0;
                switch (e) {
                    case '0':
                        out += '\0';
                        break;
                    case 'a':
                        out += '\a';
                        break;
                    case 'b':
                        out += '\b';
                        break;
                    case 't':
                    case '\t':
                        out += '\t';
                        break;
                    case 'n':
                        out += '\n';
                        break;
                    case 'v':
                        out += '\v';
                        break;
                    case 'f':
                        out += '\f';
                        break;
                    case 'r':
                        out += '\r';
                        break;
                    case 'e':
                        out += '\x1b';
                        break;
                    case ' ':
                    case '"':
                    case '/':
                    case '\\':
                        out += e;
                        break;
                    case 'x':
                    case 'u':
                    case 'U':
                        if (!hex(e == 'x' ? 2 : e == 'u' ? 4 : 8, cp)) {
                            return false;
                        }
                        if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
                            return fail("an escape that is not a Unicode character");
                        }
                        append_utf8(out, cp);
                        break;
                    default:
                        return fail("an unknown escape in a double-quoted value");
                }
                continue;
            }
            out += c;
        }
    }

    // A plain scalar from s[i] up to a comment or the end (or, in a list, ',' and ']').
    // Trailing blanks dropped. ": " inside it would start a nested mapping: refused.
    bool plain(std::string& out, bool in_list) {
        const std::size_t from = i;
        std::size_t end = i;
        while (!at_end()) {
            const char c = s[i];
            if (c == '#' && i > from && blank(s[i - 1])) {
                break;
            }
            if (in_list && (c == ',' || c == ']' || c == '[' || c == '{' || c == '}')) {
                break;
            }
            const bool ends_key = i + 1 == s.size() || blank(s[i + 1]) ||
                                  (in_list && (s[i + 1] == ',' || s[i + 1] == ']'));
            if (c == ':' && ends_key) {
                return fail("': ' inside a plain value (quote the value)");
            }
            ++i;
            if (!blank(c)) {
                end = i;
            }
        }
        out.assign(s.substr(from, end - from));
        return true;
    }

    // A single value at s[i] (a list item, or a value that starts with a refused indicator):
    // quoted or plain; anything else is refused.
    bool scalar(std::string& out, bool in_list) {
        const char c = peek();
        if (refused_indicator(c)) {
            return fail(std::string("'") + c +
                        "' where a value starts (YAML anchors, aliases, tags, block scalars and "
                        "directives are not read in a config file: quote the value)");
        }
        if (c == '"' || c == '\'') {
            return quoted(out);
        }
        if (c == '[' || c == '{' || c == '?') {
            return fail(std::string("'") + c + "' inside a list: list items are single values");
        }
        if (!plain(out, in_list)) {
            return false;
        }
        if (out.empty()) {
            return fail("an empty list item");
        }
        return true;
    }

    // A flow list starting at s[i] == '['; the whole of it must be on this line.
    bool flow_list(std::vector<std::string>& items) {
        ++i;
        for (;;) {
            skip_blanks();
            if (peek() == ']') {
                ++i;
                return true;
            }
            if (at_end() || peek() == '#') {
                return fail("a '[' list that does not close on its line");
            }
            std::string item;
            if (!scalar(item, true)) {
                return false;
            }
            items.push_back(std::move(item));
            skip_blanks();
            if (peek() == ',') {
                ++i;
            } else if (peek() != ']') {
                return fail(at_end() ? "a '[' list that does not close on its line"
                                     : "a list item followed by something other than ',' or ']'");
            }
        }
    }

    // The value after "key:", into `e`.
    bool value(YamlEntry& e) {
        skip_blanks();
        const char c = peek();
        if (at_end() || c == '#') {
            e.kind = Kind::Null;  // a block list or nested mapping may follow
            return true;
        }
        if (c == '[') {
            e.kind = Kind::List;
            return flow_list(e.values) && (only_comment_left() || fail("text after a list"));
        }
        if (c == '{') {
            e.kind = Kind::Mapping;
            return true;
        }
        std::string v;
        if (refused_indicator(c)) {
            return scalar(v, false);
        }
        if (c == '"' || c == '\'') {
            if (!quoted(v) || !(only_comment_left() || fail("text after a quoted value"))) {
                return false;
            }
        } else if (!plain(v, false)) {
            return false;
        }
        const bool null =
            c != '"' && c != '\'' && (v == "~" || v == "null" || v == "Null" || v == "NULL");
        e.kind = null ? Kind::Null : Kind::Scalar;
        if (!null) {
            e.values.push_back(std::move(v));
        }
        return true;
    }

    // "key:" at s[i]; false (without an error) when the line is not a key line.
    bool key(std::string& out) {
        const char c = peek();
        if (c == '"' || c == '\'') {
            if (!quoted(out)) {
                return false;
            }
            skip_blanks();
            if (peek() != ':') {
                return fail("a quoted key without ':' after it");
            }
            ++i;
            return true;
        }
        if (c == '[' || c == '{' || c == '?' || refused_indicator(c)) {
            return fail("a key that is not a plain or quoted string");
        }
        const std::size_t from = i;
        while (!at_end()) {
            if (s[i] == ':' && (i + 1 == s.size() || blank(s[i + 1]))) {
                std::size_t end = i;
                while (end > from && blank(s[end - 1])) {
                    --end;
                }
                out.assign(s.substr(from, end - from));
                ++i;
                return true;
            }
            if (s[i] == '#' && i > from && blank(s[i - 1])) {
                break;
            }
            ++i;
        }
        i = from;
        return false;
    }
};

// Whether the block list item at the cursor is a single value: not empty ("-" alone), not a
// list, a mapping or a nested list. The cursor is left where it was.
bool item_is_scalar(const Cursor& cur) {
    const std::string_view rest = cur.s.substr(cur.i);
    if (rest.empty() || rest.front() == '#' || rest.front() == '[' || rest.front() == '{' ||
        rest.front() == '?' || (rest.front() == '-' && (rest.size() == 1 || blank(rest[1])))) {
        return false;
    }
    if (rest.front() == '"' || rest.front() == '\'') {
        return true;
    }
    for (std::size_t k = 0; k < rest.size(); ++k) {
        if (rest[k] == '#' && k > 0 && blank(rest[k - 1])) {
            break;
        }
        if (rest[k] == ':' && (k + 1 == rest.size() || blank(rest[k + 1]))) {
            return false;  // "- key: value"
        }
    }
    return true;
}

}  // namespace

YamlResult read_yaml_subset(std::string_view text) {
    YamlResult r;
    if (text.starts_with("\xef\xbb\xbf")) {
        text.remove_prefix(3);
    }
    std::size_t number = 0;
    std::size_t mapping_indent = std::string_view::npos;
    constexpr std::size_t kNone = std::string_view::npos;
    std::size_t list_indent = kNone;  // of the block list under the last key
    bool nested = false;              // inside the last key's nested mapping
    bool open = false;                // a document has begun ("---" or a key)
    bool ended = false;               // "..." seen
    std::size_t documents = 0;        // documents ended before the current one
    auto malformed = [&](const std::string& what) {
        r.status = YamlResult::Status::Malformed;
        r.error = "line " + std::to_string(number) + ": " + what;
        r.entries.clear();
        return r;
    };
    std::size_t begin = 0;
    while (begin < text.size()) {
        std::size_t end = text.find('\n', begin);
        if (end == std::string_view::npos) {
            end = text.size();
        }
        std::string_view line = text.substr(begin, end - begin);
        begin = end + 1;
        ++number;
        if (line.ends_with('\r')) {
            line.remove_suffix(1);
        }
        std::size_t indent = 0;
        while (indent < line.size() && line[indent] == ' ') {
            ++indent;
        }
        if (indent < line.size() && line[indent] == '\t') {
            const auto rest = line.find_first_not_of(" \t");
            if (rest != std::string_view::npos && line[rest] != '#') {
                return malformed("a tab in the indentation (YAML indents with spaces)");
            }
        }
        const std::string_view body = line.substr(indent);
        if (body.empty() || body.find_first_not_of(" \t") == std::string_view::npos ||
            body.front() == '#') {
            continue;
        }
        if (indent == 0 &&
            (body == "---" || body.starts_with("--- ") || body.starts_with("---\t"))) {
            if (body.size() > 3 && body.find_first_not_of(" \t", 3) != std::string_view::npos &&
                body[body.find_first_not_of(" \t", 3)] != '#') {
                return malformed("a value on the '---' line");
            }
            documents += open ? 1 : 0;
            open = true;
            ended = false;
            mapping_indent = std::string_view::npos;
            continue;
        }
        if (indent == 0 && (body == "..." || body.starts_with("... "))) {
            ended = true;
            continue;
        }
        if (ended) {
            return malformed("text after the document's end ('...')");
        }
        if (indent == 0 && body.front() == '%') {
            return malformed("a YAML directive ('%'): not read in a config file");
        }
        Cursor cur{body, 0, {}};
        const bool item = body.front() == '-' && (body.size() == 1 || blank(body[1]));
        if (mapping_indent == std::string_view::npos) {
            std::string k;
            if (item || !cur.key(k)) {
                if (!cur.error.empty()) {
                    return malformed(cur.error);
                }
                r.status = YamlResult::Status::NotAMapping;
                return r;
            }
            mapping_indent = indent;
            cur.i = 0;
        }
        if (indent < mapping_indent) {
            return malformed("less indented than the keys above it");
        }
        YamlEntry* last = r.entries.empty() ? nullptr : &r.entries.back();
        if (item && last != nullptr &&
            (last->kind == Kind::Null || last->kind == Kind::List ||
             last->kind == Kind::ListOfNonScalars) &&
            !nested && (list_indent != kNone || last->kind == Kind::Null)) {
            if (list_indent != kNone && list_indent != indent) {
                return malformed("a list item indented unlike the items above it");
            }
            if (list_indent == kNone && last->kind != Kind::Null) {
                return malformed("a list item after a value");
            }
            list_indent = indent;
            cur.i = 1;
            cur.skip_blanks();
            if (!item_is_scalar(cur)) {
                last->kind = Kind::ListOfNonScalars;  // refused by the caller
                continue;
            }
            std::string v;
            if (!cur.scalar(v, false)) {
                return malformed(cur.error);
            }
            if (!cur.only_comment_left()) {
                return malformed("text after a quoted value");
            }
            if (last->kind != Kind::ListOfNonScalars) {
                last->kind = Kind::List;
                last->values.push_back(std::move(v));
            }
            continue;
        }
        if (indent > mapping_indent) {
            if (last != nullptr && last->kind == Kind::Null && list_indent == kNone) {
                last->kind = Kind::Mapping;  // a nested mapping: refused by the caller
                nested = true;
            }
            if (nested) {
                continue;
            }
            return malformed(
                "more indented than the keys above it (a value continued on a "
                "second line?)");
        }
        if (item) {
            return malformed("a list item where a key was expected");
        }
        nested = false;
        list_indent = kNone;
        YamlEntry e;
        if (!cur.key(e.key)) {
            return malformed(cur.error.empty() ? "expected 'key: value'" : cur.error);
        }
        if (!cur.value(e)) {
            return malformed(cur.error);
        }
        open = true;
        r.entries.push_back(std::move(e));
    }
    documents += open ? 1 : 0;
    if (documents > 1) {
        r.status = YamlResult::Status::Documents;
        r.documents = documents;
        r.entries.clear();
    }
    return r;
}

}  // namespace pdr::config::detail
