// JsonObjectView (json_scan.hpp) and the RFC 8259 validator that fills it. Over 500 lines as one
// idea: the validator's grammar rules call one another, and the view is what they collect.
#include "net/common/json_scan.hpp"

#include <algorithm>
#include <bit>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace pdr {

namespace {

static_assert(std::endian::native == std::endian::little,
              "Scanner::skip_plain reads eight bytes as a little-endian word");

bool is_digit(char c) noexcept {
    return c >= '0' && c <= '9';
}

// Recursive-descent validator over one text. Positions are indexes into `s`.
class Scanner {
public:
    Scanner(std::string_view s, std::size_t max_depth, std::size_t max_members)
        : s_(s), max_depth_(max_depth), max_members_(max_members) {}

    JsonScanStatus status = JsonScanStatus::Ok;
    std::size_t pos = 0;

    void skip_ws() noexcept {
        if (pos < s_.size() && static_cast<unsigned char>(s_[pos]) > ' ') {
            return;  // the usual case in compact JSON: no whitespace at all
        }
        while (pos < s_.size() &&
               (s_[pos] == ' ' || s_[pos] == '\t' || s_[pos] == '\n' || s_[pos] == '\r')) {
            ++pos;
        }
    }

    bool fail(JsonScanStatus st = JsonScanStatus::NotJson) noexcept {
        if (status == JsonScanStatus::Ok) {
            status = st;
        }
        return false;
    }

    // Skips the plain characters of a string (printable ASCII other than '"' and '\\'), sixteen
    // (SSE2) or eight bytes at a time: stops at the first byte that needs a closer look, or near
    // the end.
    void skip_plain() noexcept {
        constexpr std::uint64_t kOnes = 0x0101010101010101ULL;
        constexpr std::uint64_t kHigh = 0x8080808080808080ULL;
        const std::size_t n = s_.size();
#if defined(__SSE2__)
        const __m128i quote16 = _mm_set1_epi8('"');
        const __m128i slash16 = _mm_set1_epi8('\\');
        const __m128i space16 = _mm_set1_epi8(0x20);
        while (pos + 16 <= n) {
            const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s_.data() + pos));
            // Signed bytes: >= 0x80 is negative, so "less than a space" also flags non-ASCII.
            const __m128i special =
                _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, quote16), _mm_cmpeq_epi8(v, slash16)),
                             _mm_cmplt_epi8(v, space16));
            if (const auto mask = static_cast<unsigned>(_mm_movemask_epi8(special)); mask != 0) {
                pos += static_cast<std::size_t>(std::countr_zero(mask));
                return;
            }
            pos += 16;
        }
#endif
        while (pos + 8 <= n) {
            std::uint64_t w;
            std::memcpy(&w, s_.data() + pos, 8);
            const std::uint64_t quote = w ^ (kOnes * '"');
            const std::uint64_t slash = w ^ (kOnes * '\\');
            // A flag in the high bit of each byte that is >= 0x80, < 0x20, '"' or '\\'. The
            // borrow tricks can also flag bytes after a flagged one, never before: the lowest
            // flag is exact.
            const std::uint64_t special =
                (w | ((w - kOnes * 0x20) & ~w) | ((quote - kOnes) & ~quote) |
                 ((slash - kOnes) & ~slash)) &
                kHigh;
            if (special != 0) {
                pos += static_cast<std::size_t>(std::countr_zero(special)) / 8;
                return;
            }
            pos += 8;
        }
    }

    // A string starting at pos (a quote). Sets `escaped` when it holds a backslash.
    bool string(bool& escaped) noexcept {
        escaped = false;
        ++pos;  // opening quote
        const std::size_t n = s_.size();
        while (pos < n) {
            skip_plain();
            if (pos >= n) {
                break;
            }
            const auto c = static_cast<unsigned char>(s_[pos]);
            if (c == '"') {
                ++pos;
                return true;
            }
            if (c < 0x20) {
                return fail();
            }
            if (c == '\\') {
                escaped = true;
                if (!escape()) {
                    return false;
                }
                continue;
            }
            if (c < 0x80) {
                ++pos;
                continue;
            }
            if (!utf8_sequence(c)) {
                return false;
            }
        }
        return fail();
    }

    // A value at pos; `depth` is the nesting of the container holding it.
    bool value(std::size_t depth, JsonKind& kind) noexcept {
        if (pos >= s_.size()) {
            return fail();
        }
        switch (s_[pos]) {
            case '{':
                kind = JsonKind::Object;
                return object(depth + 1, nullptr);
            case '[':
                kind = JsonKind::Array;
                return array(depth + 1);
            case '"': {
                kind = JsonKind::String;
                bool escaped = false;
                return string(escaped);
            }
            case 't':
                kind = JsonKind::Boolean;
                return literal("true");
            case 'f':
                kind = JsonKind::Boolean;
                return literal("false");
            case 'n':
                kind = JsonKind::Null;
                return literal("null");
            default:
                kind = JsonKind::Number;
                return number();
        }
    }

    // Steps into the container at pos: false when it nests too deep; `empty` when it closes at
    // once with `close`.
    bool enter(std::size_t depth, char close, bool& empty) noexcept {
        if (depth > max_depth_) {
            return fail(JsonScanStatus::TooDeep);
        }
        ++pos;  // '{' or '['
        skip_ws();
        empty = pos < s_.size() && s_[pos] == close;
        if (empty) {
            ++pos;
        }
        return true;
    }

    enum class Next { More, Closed, Bad };

    // After a member or element: a comma (more follow) or the container's closing character.
    Next after_element(char close) noexcept {
        skip_ws();
        if (pos < s_.size() && s_[pos] == ',') {
            ++pos;
            skip_ws();
            return Next::More;
        }
        if (pos < s_.size() && s_[pos] == close) {
            ++pos;
            return Next::Closed;
        }
        fail();
        return Next::Bad;
    }

    // An object at pos. When `top` is given, its members are recorded there.
    bool object(std::size_t depth, std::vector<JsonMember>* top) {
        bool empty = false;
        if (!enter(depth, '}', empty)) {
            return false;
        }
        if (empty) {
            return true;
        }
        std::size_t count = 0;
        for (;;) {
            if (pos >= s_.size() || s_[pos] != '"') {
                return fail();
            }
            const std::size_t key_start = pos;
            bool escaped = false;
            if (!string(escaped)) {
                return false;
            }
            const std::size_t key_end = pos;
            if (++count > max_members_) {
                return fail(JsonScanStatus::TooManyMembers);
            }
            skip_ws();
            if (pos >= s_.size() || s_[pos] != ':') {
                return fail();
            }
            ++pos;
            skip_ws();
            const std::size_t value_start = pos;
            JsonKind kind = JsonKind::Null;
            if (depth == 1 && nested != nullptr && is_nested_key(key_start, key_end, escaped)) {
                nested->clear();  // of duplicate keys the last counts
                if (pos < s_.size() && s_[pos] == '{') {
                    kind = JsonKind::Object;
                    if (!object(depth + 1, nested)) {
                        return false;
                    }
                } else if (!value(depth, kind)) {
                    return false;
                }
            } else if (!value(depth, kind)) {
                return false;
            }
            if (top != nullptr) {
                JsonMember m;
                m.key_text = s_.substr(key_start, key_end - key_start);
                m.key = escaped ? std::string_view{} : m.key_text.substr(1, m.key_text.size() - 2);
                m.value = s_.substr(value_start, pos - value_start);
                m.kind = kind;
                top->push_back(m);
            }
            if (const Next next = after_element('}'); next != Next::More) {
                return next == Next::Closed;
            }
        }
    }

private:
    bool array(std::size_t depth) {
        bool empty = false;
        if (!enter(depth, ']', empty)) {
            return false;
        }
        if (empty) {
            return true;
        }
        for (;;) {
            JsonKind kind = JsonKind::Null;
            if (!value(depth, kind)) {
                return false;
            }
            if (const Next next = after_element(']'); next != Next::More) {
                return next == Next::Closed;
            }
        }
    }

    bool literal(std::string_view word) noexcept {
        if (s_.substr(pos, word.size()) != word) {
            return fail();
        }
        pos += word.size();
        return true;
    }

    bool digits() noexcept {
        const std::size_t start = pos;
        while (pos < s_.size() && is_digit(s_[pos])) {
            ++pos;
        }
        return pos > start;
    }

    bool number() noexcept {
        const std::size_t start = pos;
        if (pos < s_.size() && s_[pos] == '-') {
            ++pos;
        }
        if (pos >= s_.size()) {
            return fail();
        }
        if (s_[pos] == '0') {
            ++pos;
        } else if (!digits()) {
            return fail();
        }
        bool is_float = false;
        if (pos < s_.size() && s_[pos] == '.') {
            ++pos;
            is_float = true;
            if (!digits()) {
                return fail();
            }
        }
        if (pos < s_.size() && (s_[pos] == 'e' || s_[pos] == 'E')) {
            ++pos;
            is_float = true;
            if (pos < s_.size() && (s_[pos] == '+' || s_[pos] == '-')) {
                ++pos;
            }
            if (!digits()) {
                return fail();
            }
        }
        if (is_float) {
            return finite_float(s_.substr(start, pos - start)) || fail();
        }
        return true;
    }

    // nlohmann refuses floats that overflow a double (underflow to 0 or a denormal is fine).
    static bool finite_float(std::string_view text) noexcept {
        double d = 0;
        auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), d);
        (void)ptr;
        if (ec != std::errc::result_out_of_range) {
            return true;
        }
        // Out of range: overflow or underflow. Tell them apart with strtod on a copy.
        std::string copy(text);
        return std::isfinite(std::strtod(copy.c_str(), nullptr));
    }

    bool escape() noexcept {
        // s_[pos] == '\\'
        if (pos + 1 >= s_.size()) {
            return fail();
        }
        const char e = s_[pos + 1];
        switch (e) {
            case '"':
            case '\\':
            case '/':
            case 'b':
            case 'f':
            case 'n':
            case 'r':
            case 't':
                pos += 2;
                return true;
            case 'u':
                break;
            default:
                return fail();
        }
        int cp = hex4(pos + 2);
        if (cp < 0) {
            return fail();
        }
        pos += 6;
        if (cp >= 0xDC00 && cp <= 0xDFFF) {
            return fail();  // a low surrogate on its own
        }
        if (cp >= 0xD800 && cp <= 0xDBFF) {
            if (pos + 1 >= s_.size() || s_[pos] != '\\' || s_[pos + 1] != 'u') {
                return fail();
            }
            const int low = hex4(pos + 2);
            if (low < 0xDC00 || low > 0xDFFF) {
                return fail();
            }
            pos += 6;
        }
        return true;
    }

    int hex4(std::size_t at) const noexcept {
        if (at + 4 > s_.size()) {
            return -1;
        }
        int v = 0;
        for (std::size_t i = 0; i < 4; ++i) {
            const int d = detail::json_hex_digit(s_[at + i]);
            if (d < 0) {
                return -1;
            }
            v = v * 16 + d;
        }
        return v;
    }

    // A multi-byte UTF-8 sequence whose first byte is `c` (>= 0x80), RFC 3629 ranges.
    bool utf8_sequence(unsigned char c) noexcept {
        std::size_t extra = 0;
        unsigned char lo = 0x80;
        unsigned char hi = 0xBF;
        if (c >= 0xC2 && c <= 0xDF) {
            extra = 1;
        } else if (c == 0xE0) {
            extra = 2;
            lo = 0xA0;
        } else if ((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF) {
            extra = 2;
        } else if (c == 0xED) {
            extra = 2;
            hi = 0x9F;
        } else if (c == 0xF0) {
            extra = 3;
            lo = 0x90;
        } else if (c >= 0xF1 && c <= 0xF3) {
            extra = 3;
        } else if (c == 0xF4) {
            extra = 3;
            hi = 0x8F;
        } else {
            return fail();
        }
        if (pos + extra >= s_.size()) {
            return fail();
        }
        for (std::size_t i = 1; i <= extra; ++i) {
            const auto b = static_cast<unsigned char>(s_[pos + i]);
            const unsigned char min = i == 1 ? lo : 0x80;
            const unsigned char max = i == 1 ? hi : 0xBF;
            if (b < min || b > max) {
                return fail();
            }
        }
        pos += extra + 1;
        return true;
    }

    std::string_view s_;
    std::size_t max_depth_;
    std::size_t max_members_;

    bool is_nested_key(std::size_t key_start, std::size_t key_end, bool escaped) const {
        const std::string_view text = s_.substr(key_start, key_end - key_start);
        if (escaped) {
            return json_string(text) == nested_key;  // rare: keys are seldom escaped
        }
        return text.size() == nested_key.size() + 2 &&
               text.substr(1, nested_key.size()) == nested_key;
    }

public:
    // Set by JsonObjectView::scan: the top-level key whose object value's members go to
    // *nested (null: none).
    std::string_view nested_key;
    std::vector<JsonMember>* nested = nullptr;
};

}  // namespace

void JsonObjectView::reset() {
    members_.clear();
    decoded_.clear();
}

JsonScanStatus JsonObjectView::scan(std::string_view text, std::size_t max_depth,
                                    std::size_t max_members) {
    return scan_impl(text, {}, nullptr, max_depth, max_members);
}

JsonScanStatus JsonObjectView::scan(std::string_view text, std::string_view nested_key,
                                    JsonObjectView& nested, std::size_t max_depth,
                                    std::size_t max_members) {
    return scan_impl(text, nested_key, &nested, max_depth, max_members);
}

JsonScanStatus JsonObjectView::scan_impl(std::string_view text, std::string_view nested_key,
                                         JsonObjectView* nested, std::size_t max_depth,
                                         std::size_t max_members) {
    reset();
    if (nested != nullptr) {
        nested->reset();
    }
    if (text.size() >= 1 && static_cast<unsigned char>(text[0]) == 0xEF) {
        if (text.substr(0, 3) != "\xEF\xBB\xBF") {
            return JsonScanStatus::NotJson;
        }
        text.remove_prefix(3);
    }
    Scanner sc(text, max_depth, max_members);
    if (nested != nullptr) {
        sc.nested_key = nested_key;
        sc.nested = &nested->members_;
        nested->members_.reserve(16);
    }
    sc.skip_ws();
    if (sc.pos >= text.size()) {
        return JsonScanStatus::NotJson;
    }
    bool ok = false;
    bool is_object = text[sc.pos] == '{';
    if (is_object) {
        members_.reserve(16);
        ok = sc.object(1, &members_);
    } else {
        JsonKind kind = JsonKind::Null;
        ok = sc.value(0, kind);
    }
    if (ok) {
        sc.skip_ws();
        if (sc.pos != text.size()) {
            ok = sc.fail();
        }
    }
    if (!ok || !is_object) {
        members_.clear();
        if (nested != nullptr) {
            nested->members_.clear();
        }
        if (!ok) {
            return sc.status == JsonScanStatus::Ok ? JsonScanStatus::NotJson : sc.status;
        }
        return JsonScanStatus::NotObject;
    }
    finish();
    if (nested != nullptr) {
        nested->finish();
    }
    return JsonScanStatus::Ok;
}

void JsonObjectView::finish() {
    for (JsonMember& m : members_) {
        if (m.key.data() == nullptr) {  // escaped key: decode it
            decoded_.push_front(json_string(m.key_text));
            m.key = decoded_.front();
        }
    }
}

// Only rewrite() needs to know (find() takes the last of duplicates by itself), so views that
// are only read, such as a prefill's answer and its handle, never pay for the check.
bool JsonObjectView::has_duplicate_keys() const {
    // Duplicate keys are rare; a quadratic check is cheap for the usual handful of members,
    // and only runs when two keys share a length and first byte (a 64-bit filter of those).
    const std::size_t n = members_.size();
    if (n <= 32) {
        std::uint64_t seen = 0;
        bool maybe = false;
        for (const JsonMember& m : members_) {
            const std::size_t h =
                (m.key.size() * 31 + (m.key.empty() ? 0U : static_cast<unsigned char>(m.key[0]))) &
                63;
            maybe = maybe || (seen >> h & 1) != 0;
            seen |= std::uint64_t{1} << h;
        }
        for (std::size_t i = 0; maybe && i < n; ++i) {
            for (std::size_t j = i + 1; j < n; ++j) {
                if (members_[i].key == members_[j].key) {
                    return true;
                }
            }
        }
        return false;
    }
    std::vector<std::string_view> keys;
    keys.reserve(n);
    for (const JsonMember& m : members_) {
        keys.push_back(m.key);
    }
    std::sort(keys.begin(), keys.end());
    return std::adjacent_find(keys.begin(), keys.end()) != keys.end();
}

const JsonMember* JsonObjectView::find(std::string_view key) const noexcept {
    for (auto it = members_.rbegin(); it != members_.rend(); ++it) {
        if (it->key == key) {
            return &*it;
        }
    }
    return nullptr;
}

std::string JsonObjectView::rewrite(std::initializer_list<JsonEdit> edits) const {
    std::size_t size = 2;
    for (const JsonMember& m : members_) {
        size += m.key_text.size() + m.value.size() + 2;
    }
    for (const JsonEdit& e : edits) {
        size += e.key.size() + e.value.size() + 4;
    }
    std::string out;
    out.reserve(size);
    out.push_back('{');
    bool first = true;
    auto emit = [&](std::string_view key_text, std::string_view value) {
        if (!first) {
            out.push_back(',');
        }
        first = false;
        out.append(key_text).push_back(':');
        out.append(value);
    };
    auto edit_for = [&](std::string_view key) -> const JsonEdit* {
        for (const JsonEdit& e : edits) {
            if (e.key == key) {
                return &e;
            }
        }
        return nullptr;
    };
    const bool duplicates = has_duplicate_keys();
    for (std::size_t i = 0; i < members_.size(); ++i) {
        const JsonMember& m = members_[i];
        std::string_view value = m.value;
        if (duplicates) {
            bool seen_before = false;
            for (std::size_t j = 0; j < i && !seen_before; ++j) {
                seen_before = members_[j].key == m.key;
            }
            if (seen_before) {
                continue;  // emitted at its first position already
            }
            value = find(m.key)->value;  // the last value wins
        }
        if (const JsonEdit* e = edit_for(m.key)) {
            if (e->op != JsonEdit::Op::Erase) {
                emit(m.key_text, e->value);
            }
            continue;
        }
        emit(m.key_text, value);
    }
    for (const JsonEdit& e : edits) {
        if (e.op == JsonEdit::Op::Set && find(e.key) == nullptr) {
            if (!first) {
                out.push_back(',');
            }
            first = false;
            out.append("\"").append(e.key).append("\":").append(e.value);
        }
    }
    out.push_back('}');
    return out;
}

}  // namespace pdr
