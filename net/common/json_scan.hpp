#pragma once
// A validating, non-allocating view of a JSON object's top-level members, for the request path:
// the router only reads a few top-level fields of client bodies and prefill answers and passes
// everything else on as the bytes it got, so it does not build a DOM for them.
//
// Verdicts match nlohmann::json::parse (RFC 8259, UTF-8 checked, surrogate pairs checked, a
// leading UTF-8 BOM skipped, floats that overflow a double refused). Member semantics match a
// JSON object: of duplicate keys the last value wins, at the position of the first.
#include "net/common/json_limits.hpp"

#include <cstddef>
#include <cstdint>
#include <forward_list>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

namespace pdr {

enum class JsonKind : std::uint8_t { Null, Boolean, Number, String, Array, Object };

struct JsonMember {
    std::string_view key;       // decoded (escapes resolved)
    std::string_view key_text;  // as written, quotes included
    std::string_view value;     // as written
    JsonKind kind = JsonKind::Null;
};

enum class JsonScanStatus { Ok, NotJson, NotObject, TooDeep, TooManyMembers };

// One top-level edit for JsonObjectView::rewrite.
struct JsonEdit {
    enum class Op { Set, SetIfPresent, Erase };
    std::string_view key;    // plain key (written as "key" when appended)
    std::string_view value;  // JSON text for Set / SetIfPresent
    Op op = Op::Set;
};

class JsonObjectView {
public:
    JsonObjectView() = default;
    JsonObjectView(JsonObjectView&&) noexcept = default;
    JsonObjectView& operator=(JsonObjectView&&) noexcept = default;
    JsonObjectView(const JsonObjectView&) = delete;  // members point into decoded_
    JsonObjectView& operator=(const JsonObjectView&) = delete;

    // Scans `text` (which must outlive this view). Anything but Ok leaves no members.
    JsonScanStatus scan(std::string_view text, std::size_t max_depth = kMaxJsonDepth,
                        std::size_t max_members = kMaxJsonObjectMembers);
    // The same, and in the same pass `nested` gets the members of the top-level member
    // `nested_key` when its (last) value is an object (no members otherwise): what a scan of
    // that value would give, without a second pass over it.
    JsonScanStatus scan(std::string_view text, std::string_view nested_key, JsonObjectView& nested,
                        std::size_t max_depth = kMaxJsonDepth,
                        std::size_t max_members = kMaxJsonObjectMembers);

    // The member with this key (the last one of duplicates), or null.
    const JsonMember* find(std::string_view key) const noexcept;
    const std::vector<JsonMember>& members() const noexcept { return members_; }

    // A compact object text: each distinct key once, in order of first appearance, with its
    // (last) value as written, then the edits: Set replaces a value in place or appends the key
    // at the end (in edit order), SetIfPresent only replaces, Erase drops the key.
    std::string rewrite(std::initializer_list<JsonEdit> edits) const;

private:
    JsonScanStatus scan_impl(std::string_view text, std::string_view nested_key,
                             JsonObjectView* nested, std::size_t max_depth,
                             std::size_t max_members);
    void reset();
    void finish();  // decodes escaped keys
    bool has_duplicate_keys() const;

    std::vector<JsonMember> members_;
    std::forward_list<std::string> decoded_;  // keys that contained escapes (stable addresses)
};

namespace detail {
int json_hex_digit(char c) noexcept;  // 0..15, or -1 when `c` is not a hex digit
}  // namespace detail

// The integer a Number member's text holds: false for fractions, exponents and integers outside
// int64 (nlohmann would store 2^63..2^64-1 as unsigned, and an engine reading it as a signed
// count gets a negative number).
bool json_integer(std::string_view number_text, std::int64_t& out) noexcept;

// The decoded text of a String member's value (quotes included in `value_text`).
std::string json_string(std::string_view value_text);

}  // namespace pdr
