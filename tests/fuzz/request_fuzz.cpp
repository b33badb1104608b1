// libFuzzer target for the client request path, up to the bytes the legs send: the request head
// and body through Beast's request parser with the server's default header and body limits and
// the router's Transfer-Encoding rule (what net/server/request_reader.cpp does around a socket),
// then the generation route's validation, and each flow's rewrites of a valid body (pull and
// push prefill and decode bodies, the direct flow's plain decode body, the LMCache flow's
// tokenize, prefill and decode bodies). Every body the router builds from a client body must be
// one JSON object. Build and run: scripts/fuzz request SECONDS. Seeds: corpus/request/.
#include <boost/beast/http.hpp>
#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "config/ascii.hpp"
#include "router/api/validate.hpp"
#include "router/disagg/lmcache_rewrite.hpp"
#include "router/disagg/push_rewrite.hpp"
#include "router/disagg/rewrite.hpp"

namespace {

namespace http = boost::beast::http;
using namespace pdr;

void expect_object(std::string_view text) {
    const auto j = nlohmann::json::parse(text, nullptr, false);
    if (j.is_discarded() || !j.is_object()) {
        std::abort();
    }
}

void lmcache_bodies(const api::ParsedGeneration& parsed, api::GenerationKind kind) {
    namespace lm = disagg::lmcache;
    lm::ClientAsk ask;
    std::string error, param;
    const auto api =
        kind == api::GenerationKind::Completions ? lm::Api::Completions : lm::Api::Chat;
    if (!lm::read_client_ask(parsed.body, api, parsed.stream, ask, error, param)) {
        return;
    }
    if (!ask.tokens) {  // token ids as the prompt: the flow asks no /tokenize
        expect_object(lm::make_tokenize_body(parsed.body, ask));
    }
    std::vector<std::int64_t> ids = ask.tokens.value_or(std::vector<std::int64_t>{1, 2, 3});
    lm::DisaggSpec spec{"req-1", "127.0.0.1", {5555}, {5556}};
    expect_object(lm::make_prefill_body(parsed.body, ids, &spec));
    expect_object(lm::make_prefill_body(parsed.body, ids, nullptr));
    expect_object(lm::make_decode_body(parsed.body, ask, ids, 7));
}

void generation(api::GenerationKind kind, std::string_view content_type, std::string_view body) {
    api::ParsedGeneration parsed;
    if (!api::validate_generation(kind, content_type, body, parsed).ok()) {
        return;
    }
    expect_object(disagg::make_prefill_body(parsed.body));
    const std::string kv = disagg::prefill_kv_request("xfer-1", "Y29udHJvbA==");
    expect_object(disagg::make_prefill_body(parsed.body, kv));
    expect_object(
        disagg::make_decode_body(body, R"({"remote_engine_id":"e","remote_block_ids":[1]})"));
    config::PushCoords coords{"engine-0", "127.0.0.1", 5600, 1, 1};
    expect_object(disagg::make_decode_body(
        body, disagg::push_decode_params(coords, "127.0.0.1", "req-1", "xfer-1")));
    expect_object(disagg::make_plain_decode_body(body));
    lmcache_bodies(parsed, kind);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    // The server's default limits (config/config.hpp): 16 KiB of head, 8 MiB of body.
    http::request_parser<http::string_body> parser;
    parser.header_limit(16u << 10);
    parser.body_limit(8u << 20);
    parser.eager(true);
    boost::beast::error_code ec;
    std::string_view rest(reinterpret_cast<const char*>(data), size);
    // Skip blank lines before the request line, as skip_blank_lines does.
    while (!rest.empty() && (rest.front() == '\r' || rest.front() == '\n')) {
        rest.remove_prefix(1);
    }
    while (!rest.empty() && !parser.is_done()) {
        const std::size_t n = parser.put(boost::asio::buffer(rest.data(), rest.size()), ec);
        if (ec == http::error::need_more) {
            break;
        }
        if (ec) {
            return 0;
        }
        rest.remove_prefix(n);
        if (n == 0) {
            break;
        }
    }
    // A request body is never delimited by the close: what is not done by the input's end is a
    // request the server would still be waiting for.
    if (!parser.is_done()) {
        return 0;
    }
    const auto& req = parser.get();
    auto [first, last] = req.equal_range(http::field::transfer_encoding);
    if (first != last && (std::next(first) != last || !ascii::iequals(first->value(), "chunked"))) {
        return 0;
    }
    disagg::request_id_for(req);
    disagg::leg_headers(req, "upstream-key");
    const std::string_view ct = req[http::field::content_type];
    if (req.target() == "/v1/chat/completions") {
        generation(api::GenerationKind::ChatCompletions, ct, req.body());
    } else {
        generation(api::GenerationKind::Completions, ct, req.body());
    }
    disagg::Json obj;
    api::parse_object(req.body(), obj);
    return 0;
}
