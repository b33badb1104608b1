// TrackedExchange puts X-Request-Id on every answer and records the status sent.
#include "router/api/tracked_exchange.hpp"

#include "net/server/reply.hpp"
#include "router/disagg/canceler.hpp"

#include <gtest/gtest.h>

#include <vector>

namespace pdr::api {
namespace {

class FakeExchange final : public server::Exchange {
public:
    FakeExchange() : req_{http::verb::post, "/v1/completions", 11} {}
    const server::Request& request() const override { return req_; }
    std::string remote_address() const override { return "127.0.0.1:1"; }
    awaitable<error_code> respond(server::Response res) override {
        responded_ = true;
        response = std::move(res);
        co_return error_code{};
    }
    awaitable<error_code> begin_stream(http::response<http::empty_body> h) override {
        responded_ = true;
        head = std::move(h);
        co_return error_code{};
    }
    awaitable<error_code> write_chunk(std::string_view data) override {
        chunks.emplace_back(data);
        co_return error_code{};
    }
    awaitable<error_code> end_stream() override {
        ended = true;
        co_return error_code{};
    }
    void abort() override { aborted = true; }
    bool responded() const override { return responded_; }
    bool client_gone() const override { return false; }

    server::Request req_;
    server::Response response;
    http::response<http::empty_body> head;
    std::vector<std::string> chunks;
    bool responded_ = false, ended = false, aborted = false;
};

template <class F>
void run(F f) {
    net::io_context ioc;
    bool done = false;
    net::co_spawn(ioc, f(), [&](std::exception_ptr e) {
        done = true;
        if (e) {
            std::rethrow_exception(e);
        }
    });
    ioc.run();
    ASSERT_TRUE(done);
}

TEST(TrackedExchange, RespondCarriesRequestIdAndStatus) {
    FakeExchange inner;
    TrackedExchange ex(inner, "rid-1");
    EXPECT_EQ(ex.status(), 0u);
    run([&]() -> awaitable<void> {
        co_await server::respond_error(ex, Errc::NoDecodeInstance, "none");
        // A second answer is never sent.
        co_await server::respond_error(ex, Errc::Internal, "again");
    });
    EXPECT_EQ(ex.status(), 503u);
    EXPECT_EQ(inner.response.result_int(), 503u);
    EXPECT_EQ(inner.response["X-Request-Id"], "rid-1");
    EXPECT_EQ(inner.response[http::field::content_type], "application/json");
    EXPECT_NE(inner.response.body().find("no_decode_instance"), std::string::npos);
}

TEST(TrackedExchange, StreamHeadCarriesRequestId) {
    FakeExchange inner;
    TrackedExchange ex(inner, "rid-2");
    run([&]() -> awaitable<void> {
        http::response<http::empty_body> head{http::status::ok, 11};
        co_await ex.begin_stream(std::move(head));
        co_await ex.write_chunk("data: x\n\n");
        co_await ex.end_stream();
    });
    EXPECT_EQ(ex.status(), 200u);
    EXPECT_EQ(inner.head["X-Request-Id"], "rid-2");
    ASSERT_EQ(inner.chunks.size(), 1u);
    EXPECT_EQ(inner.chunks[0], "data: x\n\n");
    EXPECT_TRUE(inner.ended);
}

TEST(TrackedExchange, RelayedAnswerKeepsStatusTypeAndBody) {
    FakeExchange inner;
    TrackedExchange ex(inner, "rid-3");
    run([&]() -> awaitable<void> {
        co_await server::respond_relayed(ex, 422, "application/problem+json", "{\"x\":1}");
    });
    EXPECT_EQ(inner.response.result_int(), 422u);
    EXPECT_EQ(inner.response[http::field::content_type], "application/problem+json");
    EXPECT_EQ(inner.response.body(), "{\"x\":1}");
    EXPECT_EQ(inner.response["X-Request-Id"], "rid-3");
}

class FakeStream final : public upstream::ResponseStream {
public:
    const wire::ResponseFields& head() const override { return head_; }
    awaitable<upstream::Failure> read_some(std::string&) override {
        co_return upstream::Failure::None;
    }
    bool done() const override { return true; }
    awaitable<upstream::Failure> read_all(std::string&) override {
        co_return upstream::Failure::None;
    }
    void cancel() override { ++cancels; }

    wire::ResponseFields head_;
    int cancels = 0;
};

// A client that goes away reaches the legs through the handler's cancellation (see
// FrontDisconnectCancelsUpstreamLeg in client_stream_test.cpp); the canceler is for a flow that
// gives up on its legs itself.
TEST(LegCanceler, CancelAllCancelsEveryOpenStreamAndOnlyThose) {
    FakeStream prefill, decode, closed;
    disagg::LegCanceler canceler;
    {
        auto c = canceler.add(closed);  // a stream that ended normally: unregistered
    }
    auto p = canceler.add(prefill);  // two legs open at once
    auto d = canceler.add(decode);
    EXPECT_EQ(canceler.open(), 2u);
    canceler.cancel_all();
    EXPECT_EQ(prefill.cancels, 1);
    EXPECT_EQ(decode.cancels, 1);
    EXPECT_EQ(closed.cancels, 0);
    {
        auto moved = std::move(p);  // a moved Registration unregisters once
    }
    EXPECT_EQ(canceler.open(), 1u);
}

}  // namespace
}  // namespace pdr::api
