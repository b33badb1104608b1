#pragma once
// The YAML a config file is written in, read without a YAML library: one block mapping of keys
// to values, each value on its key's line (a plain, 'single' or "double" quoted scalar, or a
// flow list [a, "b"]) or a block list of "- item" lines below the key; comments, blank lines, a
// leading "---" and a closing "...". A config value needs nothing else of YAML (anchors, tags,
// multi-line scalars, nested mappings), and anything else is refused with its line number.
// It replaced yaml-cpp 0.7 (Debian 12), which ran for seconds into std::bad_alloc on small
// malformed files that fuzzing found (docs/testing.md). Internal to config/.
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace pdr::config::detail {

struct YamlEntry {
    enum class Kind { Scalar, List, Null, Mapping, ListOfNonScalars };
    std::string key;
    Kind kind = Kind::Null;
    std::vector<std::string> values;  // Scalar: one; List: the items
};

struct YamlResult {
    enum class Status {
        Ok,
        Malformed,    // `error` says where and what ("line 3: ...")
        NotAMapping,  // the document is a list or a scalar
        Documents,    // more than one document (`documents` of them)
    };
    Status status = Status::Ok;
    std::string error;
    std::size_t documents = 0;
    std::vector<YamlEntry> entries;  // in file order (duplicates kept: the caller refuses them)
};

YamlResult read_yaml_subset(std::string_view text);

}  // namespace pdr::config::detail
