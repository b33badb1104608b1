// Push mode's rewrite rules (PROTOCOLS.md §4): the prefill leg's KV request with the transfer id
// (and the router agent's descriptor), the decode leg's kv_transfer_params, and the check of P's
// answer's transfer_mode.
#include "router/disagg/push_rewrite.hpp"

#include "router/disagg/rewrite.hpp"

#include <gtest/gtest.h>

#include <regex>
#include <set>

namespace pdr::disagg {
namespace {

TEST(PushRewrite, TransferIdsAreFreshXferUuids) {
    const std::regex shape(
        "xfer-[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}");
    std::set<std::string> seen;
    for (int i = 0; i < 100; ++i) {
        const std::string id = new_transfer_id();
        EXPECT_TRUE(std::regex_match(id, shape)) << id;
        EXPECT_TRUE(seen.insert(id).second) << "repeated " << id;
    }
}

TEST(PushRewrite, PrefillBodyIsThePullBodyPlusTheTransferId) {
    JsonObjectView body;
    const std::string text = R"({"model":"m","prompt":"hi","stream":true,"max_tokens":9})";
    ASSERT_EQ(body.scan(text), JsonScanStatus::Ok);
    const std::string out = make_prefill_body(body, prefill_kv_request("xfer-1", {}));
    EXPECT_EQ(out, R"({"model":"m","prompt":"hi","stream":false,"max_tokens":1,)"
                   R"("kv_transfer_params":{"do_remote_decode":true,"do_remote_prefill":false,)"
                   R"("remote_engine_id":null,"remote_block_ids":null,"remote_host":null,)"
                   R"("remote_port":null,"transfer_id":"xfer-1"}})");
    // Without a transfer id or descriptor: exactly the pull-mode request object.
    EXPECT_EQ(prefill_kv_request({}, {}), kPrefillKvRequest);
    const Json with_control = Json::parse(prefill_kv_request("xfer-2", "QUJD\"x"));
    EXPECT_EQ(with_control["transfer_id"], "xfer-2");
    EXPECT_EQ(with_control["pdx_control"], "QUJD\"x");
}

TEST(PushRewrite, DecodeParamsNameThePrefillWithoutBlockIds) {
    config::PushCoords c;
    c.engine_id = "engine \"a\"";
    c.side_channel_port = 5601;
    c.tp_size = 2;
    c.pp_size = 3;
    const Json j = Json::parse(push_decode_params(c, "10.0.0.5", "req-1", "xfer-9"));
    EXPECT_EQ(j.dump(), R"({"do_remote_decode":false,"do_remote_prefill":true,)"
                        R"("remote_engine_id":"engine \"a\"","remote_host":"10.0.0.5",)"
                        R"("remote_port":5601,"tp_size":2,"pp_size":3,)"
                        R"("remote_request_id":"req-1","transfer_id":"xfer-9"})");
    EXPECT_FALSE(j.contains("remote_block_ids"));
    // Spliced into the client's original body as the decode leg's kv_transfer_params.
    const Json d = Json::parse(
        make_decode_body(R"({"prompt":"x","stream":true})", push_decode_params(c, "h", "r", "t")));
    EXPECT_EQ(d["stream"], true);
    EXPECT_EQ(d["kv_transfer_params"]["transfer_id"], "t");
}

TEST(PushRewrite, PrefillAnswerMustSayPush) {
    std::string mode;
    EXPECT_EQ(
        check_push_answer(R"({"id":"x","kv_transfer_params":{"transfer_mode":"push"}})", mode),
        PushAnswer::Ok);
    EXPECT_EQ(check_push_answer(R"({"kv_transfer_params":{"transfer_mode":"pull"}})", mode),
              PushAnswer::WrongMode);
    EXPECT_EQ(mode, "pull");
    EXPECT_EQ(check_push_answer(R"({"kv_transfer_params":{"remote_block_ids":[1]}})", mode),
              PushAnswer::WrongMode);
    EXPECT_EQ(mode, "missing");
    EXPECT_EQ(check_push_answer(R"({"kv_transfer_params":null})", mode), PushAnswer::WrongMode);
    EXPECT_EQ(check_push_answer(R"({"choices":[]})", mode), PushAnswer::WrongMode);
    EXPECT_EQ(check_push_answer(R"({"kv_transfer_params":{"transfer_mode":1}})", mode),
              PushAnswer::WrongMode);
    EXPECT_EQ(mode, "1");
    EXPECT_EQ(check_push_answer("not json", mode), PushAnswer::NotJson);
    EXPECT_EQ(check_push_answer("[1]", mode), PushAnswer::NotJson);
}

}  // namespace
}  // namespace pdr::disagg
