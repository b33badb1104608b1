#include "net/common/response_head.hpp"

#include "config/ascii.hpp"

#include <boost/beast/http/error.hpp>
#include <boost/beast/http/field.hpp>

#include <algorithm>
#include <cstring>
#include <limits>

namespace pdr::wire {

namespace http = boost::beast::http;
using boost::system::error_code;

// Fills a ResponseFields: fields are added as views into the parsed text, then the text is
// copied once and the views moved onto the copy.
struct HeadBuilder {
    ResponseFields& f;
    void start(unsigned status, unsigned version) {
        f.text_.reset();
        f.size_ = 0;
        f.fields_.clear();
        f.fields_.reserve(8);
        f.status_ = status;
        f.version_ = version;
    }
    void add(http::field code, std::string_view name, std::string_view value) {
        f.fields_.push_back(HeadField(code, name, value));
    }
    // Copies `text` (which the views point into) and points them at the copy.
    void keep(std::string_view text) {
        f.text_ = std::make_unique_for_overwrite<char[]>(text.size());
        std::memcpy(f.text_.get(), text.data(), text.size());
        f.size_ = text.size();
        rebase(text.data());
    }
    void rebase(const char* from) {
        const char* to = f.text_.get();
        for (auto& x : f.fields_) {
            x.name_ = {to + (x.name_.data() - from), x.name_.size()};
            x.value_ = {to + (x.value_.data() - from), x.value_.size()};
        }
    }
};

ResponseFields::ResponseFields(const ResponseFields& other)
    : size_(other.size_), fields_(other.fields_), status_(other.status_), version_(other.version_) {
    if (other.text_) {
        text_ = std::make_unique_for_overwrite<char[]>(size_);
        std::memcpy(text_.get(), other.text_.get(), size_);
        HeadBuilder{*this}.rebase(other.text_.get());
    }
}

ResponseFields& ResponseFields::operator=(const ResponseFields& other) {
    if (this != &other) {
        ResponseFields copy(other);
        *this = std::move(copy);
    }
    return *this;
}

std::string_view ResponseFields::operator[](http::field name) const noexcept {
    for (const auto& x : fields_) {
        if (x.name() == name) {
            return x.value();
        }
    }
    return {};
}

std::string_view ResponseFields::operator[](std::string_view name) const noexcept {
    for (const auto& x : fields_) {
        if (ascii::iequals(x.name_string(), name)) {
            return x.value();
        }
    }
    return {};
}

ResponseFields ResponseFields::make(
    unsigned status, std::vector<std::pair<std::string_view, std::string_view>> fields,
    unsigned version) {
    std::string text;
    for (const auto& [name, value] : fields) {
        text.append(name).append(value);
    }
    ResponseFields out;
    HeadBuilder b{out};
    b.start(status, version);
    std::size_t at = 0;
    for (const auto& [name, value] : fields) {
        b.add(http::string_to_field(name), {text.data() + at, name.size()},
              {text.data() + at + name.size(), value.size()});
        at += name.size() + value.size();
    }
    b.keep(text);
    return out;
}

namespace {

// tchar (RFC 9110 5.6.2): ALPHA, DIGIT and !#$%&'*+-.^_`|~
constexpr bool tchar_of(unsigned char c) noexcept {
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) {
        return true;
    }
    for (const char* t = "!#$%&'*+-.^_`|~"; *t != 0; ++t) {
        if (c == static_cast<unsigned char>(*t)) {
            return true;
        }
    }
    return false;
}

struct Tables {
    bool tchar[256]{};
    bool text[256]{};  // HTAB / SP / VCHAR / obs-text: what a reason or a field value may hold
    constexpr Tables() {
        for (unsigned c = 0; c < 256; ++c) {
            tchar[c] = tchar_of(static_cast<unsigned char>(c));
            text[c] = c == '\t' || (c >= 0x20 && c != 0x7f);
        }
    }
};
constexpr Tables kTables;

bool is_digit(char c) noexcept {
    return c >= '0' && c <= '9';
}

bool is_ows(char c) noexcept {
    return c == ' ' || c == '\t';
}

// The head's next line from `at`: its end (the index of its CR) in `cr`. False with `ec` clear
// when the line has not ended yet; false with `ec` set when what is there cannot end as a line
// does (a LF without its CR, a CR followed by anything but LF).
bool next_line(std::string_view in, std::size_t at, std::size_t& cr, error_code& ec) {
    const void* lf = std::memchr(in.data() + at, '\n', in.size() - at);
    if (lf == nullptr) {
        // A CR before the last byte cannot be a line end any more.
        const void* stray = std::memchr(in.data() + at, '\r', in.size() - at);
        if (stray != nullptr && static_cast<const char*>(stray) + 1 < in.data() + in.size()) {
            ec = http::error::bad_line_ending;
        }
        return false;
    }
    const std::size_t n = static_cast<std::size_t>(static_cast<const char*>(lf) - in.data());
    if (n == at || in[n - 1] != '\r') {
        ec = http::error::bad_line_ending;
        return false;
    }
    cr = n - 1;
    return true;
}

// Whether the start of a status line that has not ended yet can still become one: garbage
// fails before its line ends.
bool status_prefix_ok(std::string_view part, error_code& ec) {
    static constexpr std::string_view kShape = "HTTP/1.0 000 ";  // 0: a digit (1.0 or 1.1)
    const std::size_t n = std::min(part.size(), kShape.size());
    for (std::size_t i = 0; i < n; ++i) {
        const bool ok = i == 7             ? part[i] == '0' || part[i] == '1'
                        : kShape[i] == '0' ? is_digit(part[i])
                                           : part[i] == kShape[i];
        if (!ok) {
            ec = i < 9 ? http::error::bad_version : http::error::bad_status;
            return false;
        }
    }
    for (std::size_t i = kShape.size(); i < part.size(); ++i) {
        // (A CR may be the last byte: its LF has not come yet.)
        if (!kTables.text[static_cast<unsigned char>(part[i])] &&
            !(part[i] == '\r' && i + 1 == part.size())) {
            ec = http::error::bad_reason;
            return false;
        }
    }
    return true;
}

// The same for a field line: a name, then after its colon a value.
bool field_prefix_ok(std::string_view part, error_code& ec) {
    if (!part.empty() && (part[0] == ' ' || part[0] == '\t')) {
        ec = http::error::bad_obs_fold;
        return false;
    }
    std::size_t i = 0;
    while (i < part.size() && kTables.tchar[static_cast<unsigned char>(part[i])]) {
        ++i;
    }
    if (i == part.size() || (part[i] == '\r' && i == 0 && part.size() == 1)) {
        return true;  // a name so far (or the empty line's CR)
    }
    if (part[i] != ':' || i == 0) {
        ec = http::error::bad_field;
        return false;
    }
    for (++i; i < part.size(); ++i) {
        if (!kTables.text[static_cast<unsigned char>(part[i])] &&
            !(part[i] == '\r' && i + 1 == part.size())) {
            ec = http::error::bad_value;
            return false;
        }
    }
    return true;
}

// "HTTP/1.0" or "HTTP/1.1", SP 3DIGIT SP reason, without its CRLF.
bool parse_status_line(std::string_view line, HeadBuilder& b, error_code& ec) {
    if (line.size() < 9 || line.substr(0, 5) != "HTTP/" || line[5] != '1' || line[6] != '.' ||
        (line[7] != '0' && line[7] != '1') || line[8] != ' ') {
        ec = http::error::bad_version;
        return false;
    }
    if (line.size() < 13 || !is_digit(line[9]) || !is_digit(line[10]) || !is_digit(line[11]) ||
        line[12] != ' ') {
        ec = http::error::bad_status;
        return false;
    }
    for (std::size_t i = 13; i < line.size(); ++i) {
        if (!kTables.text[static_cast<unsigned char>(line[i])]) {
            ec = http::error::bad_reason;
            return false;
        }
    }
    b.start(static_cast<unsigned>((line[9] - '0') * 100 + (line[10] - '0') * 10 + (line[11] - '0')),
            static_cast<unsigned>(10 + (line[7] - '0')));
    return true;
}

// A Content-Length value: 1*DIGIT, or a list of them (OWS "," OWS between) that all agree.
bool parse_length(std::string_view v, std::uint64_t& out) {
    bool have = false;
    std::size_t i = 0;
    for (;;) {
        if (i == v.size() || !is_digit(v[i])) {
            return false;
        }
        std::uint64_t n = 0;
        while (i < v.size() && is_digit(v[i])) {
            const unsigned d = static_cast<unsigned>(v[i] - '0');
            if (n > (std::numeric_limits<std::uint64_t>::max() - d) / 10) {
                return false;
            }
            n = n * 10 + d;
            ++i;
        }
        if (have && n != out) {
            return false;
        }
        out = n;
        have = true;
        while (i < v.size() && is_ows(v[i])) {
            ++i;
        }
        if (i == v.size()) {
            return true;
        }
        if (v[i] != ',') {
            return false;
        }
        ++i;
        while (i < v.size() && is_ows(v[i])) {
            ++i;
        }
    }
}

// True when the last element of a Transfer-Encoding list is "chunked".
bool ends_chunked(std::string_view v) {
    const auto comma = v.rfind(',');
    return ascii::iequals(ascii::trim(comma == std::string_view::npos ? v : v.substr(comma + 1)),
                          "chunked");
}

// A Connection list: tokens, with commas and OWS between them (empty items allowed).
bool valid_options(std::string_view v) {
    for (const char c : v) {
        if (!kTables.tchar[static_cast<unsigned char>(c)] && !is_ows(c) && c != ',') {
            return false;
        }
    }
    // No whitespace inside an item: "a b" is not a token.
    for (std::size_t i = 1; i + 1 < v.size(); ++i) {
        if (is_ows(v[i]) && kTables.tchar[static_cast<unsigned char>(v[i - 1])]) {
            std::size_t j = i;
            while (j < v.size() && is_ows(v[j])) {
                ++j;
            }
            if (j < v.size() && v[j] != ',') {
                return false;
            }
        }
    }
    return true;
}

// Whether a Connection list holds `option` (case-insensitive).
bool has_option(std::string_view v, std::string_view option) {
    while (!v.empty()) {
        const auto comma = v.find(',');
        if (ascii::iequals(ascii::trim(v.substr(0, comma)), option)) {
            return true;
        }
        v.remove_prefix(comma == std::string_view::npos ? v.size() : comma + 1);
    }
    return false;
}

}  // namespace

namespace {

HeadParse parse_head(std::string_view in, std::size_t max_head, bool head_request,
                     ResponseHead& out, std::size_t& used, error_code& ec) {
    ec = {};
    used = 0;
    const std::string_view text = in.substr(0, std::min(in.size(), max_head));
    auto need_more = [&]() {
        if (!ec && in.size() >= max_head) {
            ec = http::error::header_limit;  // no end of the head within the limit
        }
        return ec ? HeadParse::Failed : HeadParse::NeedMore;
    };
    std::size_t cr = 0;
    if (!next_line(text, 0, cr, ec)) {
        if (!ec) {
            status_prefix_ok(text, ec);
        }
        return need_more();
    }
    out.body = BodyEnd::None;
    out.length = 0;
    out.keep_alive = false;
    HeadBuilder builder{out.fields};
    if (!parse_status_line(text.substr(0, cr), builder, ec)) {
        return HeadParse::Failed;
    }
    bool have_length = false;
    bool have_coding = false;
    bool chunked = false;
    bool close = false;
    bool keep_alive = false;
    std::uint64_t length = 0;
    for (std::size_t at = cr + 2;; at = cr + 2) {
        if (!next_line(text, at, cr, ec)) {
            if (!ec) {
                field_prefix_ok(text.substr(at), ec);
            }
            return need_more();
        }
        if (cr == at) {  // the empty line: the head's end
            used = cr + 2;
            break;
        }
        const unsigned char first = static_cast<unsigned char>(text[at]);
        if (first == ' ' || first == '\t') {
            ec = http::error::bad_obs_fold;
            return HeadParse::Failed;
        }
        std::size_t i = at;
        while (i < cr && kTables.tchar[static_cast<unsigned char>(text[i])]) {
            ++i;
        }
        if (i == at || i == cr || text[i] != ':') {
            ec = http::error::bad_field;
            return HeadParse::Failed;
        }
        const std::string_view name = text.substr(at, i - at);
        ++i;
        while (i < cr && is_ows(text[i])) {
            ++i;
        }
        std::size_t end = cr;
        while (end > i && is_ows(text[end - 1])) {
            --end;
        }
        for (std::size_t k = i; k < end; ++k) {
            if (!kTables.text[static_cast<unsigned char>(text[k])]) {
                ec = http::error::bad_value;
                return HeadParse::Failed;
            }
        }
        const std::string_view value = text.substr(i, end - i);
        const http::field f = http::string_to_field(name);
        if (f == http::field::content_length) {
            std::uint64_t n = 0;
            if (have_coding || !parse_length(value, n) || (have_length && n != length)) {
                ec = http::error::bad_content_length;
                return HeadParse::Failed;
            }
            have_length = true;
            length = n;
        } else if (f == http::field::transfer_encoding) {
            if (have_coding || have_length) {
                ec = http::error::bad_transfer_encoding;
                return HeadParse::Failed;
            }
            have_coding = true;
            chunked = ends_chunked(value);
        } else if (f == http::field::connection || f == http::field::proxy_connection) {
            if (!valid_options(value)) {
                ec = http::error::bad_value;
                return HeadParse::Failed;
            }
        }
        if (f == http::field::connection) {
            close = close || has_option(value, "close");
            keep_alive = keep_alive || has_option(value, "keep-alive");
        }
        builder.add(f, name, value);
    }
    builder.keep(text.substr(0, used));
    out.keep_alive = !close && (out.fields.version() >= 11 || keep_alive);
    const unsigned status = out.fields.result_int();  // (set by parse_status_line)
    if (head_request || status / 100 == 1 || status == 204 || status == 304) {
        out.body = BodyEnd::None;
    } else if (chunked) {
        out.body = BodyEnd::Chunked;
    } else if (have_length) {
        out.body = length == 0 ? BodyEnd::None : BodyEnd::Length;
        out.length = length;
    } else {
        out.body = BodyEnd::ToEof;
    }
    return HeadParse::Done;
}

}  // namespace

HeadParse parse_response_head(std::string_view in, std::size_t max_head, bool head_request,
                              ResponseHead& out, std::size_t& used, error_code& ec) {
    const HeadParse r = parse_head(in, max_head, head_request, out, used, ec);
    if (r != HeadParse::Done) {
        out.fields = ResponseFields();  // no views into `in` are left behind
    }
    return r;
}

}  // namespace pdr::wire
