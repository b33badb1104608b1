#pragma once
// Header field lookups by a walk of a head's fields in their order. A head holds a handful of
// fields, while Beast's basic_fields::find (and operator[], equal_range) compares names
// case-insensitively down a tree: about 300 instructions a lookup, with several lookups per leg
// on the request path. The walk compares each field's code, or a name's length before its
// letters. Of repeated fields the first is found, as with Beast's find.
#include "net/common/io.hpp"

#include <cstddef>
#include <string_view>

namespace pdr::wire {

template <class Fields>
const typename Fields::value_type* find_field(const Fields& fields, http::field name) noexcept {
    for (const auto& f : fields) {
        if (f.name() == name) {
            return &f;
        }
    }
    return nullptr;
}

template <class Fields>
const typename Fields::value_type* find_field(const Fields& fields,
                                              std::string_view name) noexcept {
    for (const auto& f : fields) {
        const std::string_view n = f.name_string();
        if (n.size() == name.size() && beast::iequals(n, name)) {
            return &f;
        }
    }
    return nullptr;
}

// The value of the first field `name`; empty when there is none.
template <class Fields, class Name>
std::string_view field_value(const Fields& fields, const Name& name) noexcept {
    const auto* f = find_field(fields, name);
    return f != nullptr ? std::string_view(f->value()) : std::string_view();
}

template <class Fields>
std::size_t field_count(const Fields& fields, http::field name) noexcept {
    std::size_t n = 0;
    for (const auto& f : fields) {
        n += f.name() == name ? 1 : 0;
    }
    return n;
}

}  // namespace pdr::wire
