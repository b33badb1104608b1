// decode_kv_ready: a SAX pass over one msgpack value that keeps only the top-level `req_id`
// (nothing else is built, and the nesting is bounded before the parser recurses further).
#include "router/kv/kv_ready_frame.hpp"

#include <nlohmann/json.hpp>

#include "router/kv/kv_ready_table.hpp"

namespace pdr::kv {

namespace {

using json = nlohmann::json;

class NotificationSax {
public:
    bool null() { return scalar(); }
    bool boolean(bool) { return scalar(); }
    bool number_integer(json::number_integer_t) { return scalar(); }
    bool number_unsigned(json::number_unsigned_t) { return scalar(); }
    bool number_float(json::number_float_t, const json::string_t&) { return scalar(); }
    bool binary(json::binary_t&) { return scalar(); }
    bool string(json::string_t& s) {
        if (at_req_id_) {
            req_id_ = std::move(s);
            has_req_id_ = true;
        }
        return scalar();
    }
    bool start_object(std::size_t) {
        if (first_) {
            top_is_map_ = true;
        }
        return open();
    }
    bool key(json::string_t& k) {
        at_req_id_ = depth_ == 1 && k == "req_id";
        if (at_req_id_) {
            has_req_id_ = false;  // the last `req_id` counts, as in a map built from the bytes
            req_id_.clear();
        }
        return true;
    }
    bool end_object() { return close(); }
    bool start_array(std::size_t) { return open(); }
    bool end_array() { return close(); }
    bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) {
        return false;
    }

    bool top_is_map() const noexcept { return top_is_map_; }
    bool has_req_id() const noexcept { return has_req_id_; }
    std::string& req_id() noexcept { return req_id_; }

private:
    bool scalar() {
        first_ = false;
        at_req_id_ = false;
        return true;
    }
    bool open() {
        first_ = false;
        at_req_id_ = false;
        return ++depth_ <= KvReadyFrame::kMaxDepth;
    }
    bool close() {
        --depth_;
        return true;
    }

    std::size_t depth_ = 0;
    bool first_ = true;
    bool top_is_map_ = false;
    bool at_req_id_ = false;
    bool has_req_id_ = false;
    std::string req_id_;
};

KvReadyFrame refused(metrics::KvReadyMalformed why) {
    return KvReadyFrame{{}, why};
}

}  // namespace

KvReadyFrame decode_kv_ready(std::string_view bytes, std::size_t max_frame_bytes) {
    using metrics::KvReadyMalformed;
    if (bytes.size() > max_frame_bytes) {
        return refused(KvReadyMalformed::TooLarge);
    }
    NotificationSax sax;
    bool parsed = false;
    try {
        parsed = json::sax_parse(bytes.begin(), bytes.end(), &sax, json::input_format_t::msgpack,
                                 /*strict=*/true);
    } catch (const std::exception&) {  // the SAX reader reports errors; this is a last resort
        parsed = false;
    }
    if (!parsed) {
        return refused(KvReadyMalformed::NotMsgpack);
    }
    if (!sax.top_is_map()) {
        return refused(KvReadyMalformed::NotMap);
    }
    if (!sax.has_req_id() || sax.req_id().empty()) {
        return refused(KvReadyMalformed::NoReqId);
    }
    if (sax.req_id().size() > KvReadyTable::kMaxIdBytes) {
        return refused(KvReadyMalformed::IdTooLong);
    }
    return KvReadyFrame{std::move(sax.req_id()), std::nullopt};
}

}  // namespace pdr::kv
