#pragma once
// An Exchange decorator used for every request: puts X-Request-Id on every response and
// remembers the status sent (for metrics and the per-request log line).
#include "net/server/http_server.hpp"

#include <string>

namespace pdr::api {

class TrackedExchange final : public server::Exchange {
public:
    TrackedExchange(server::Exchange& inner, std::string request_id)
        : inner_(inner), request_id_(std::move(request_id)) {
        inner_.set_request_id(request_id_);
    }

    const server::Request& request() const override { return inner_.request(); }
    std::string remote_address() const override { return inner_.remote_address(); }
    awaitable<error_code> respond(server::Response res) override;
    awaitable<error_code> begin_stream(http::response<http::empty_body> head) override;
    awaitable<error_code> begin_stream_held(http::response<http::empty_body> head) override;
    awaitable<error_code> write_chunk(std::string_view data) override;
    std::optional<awaitable<error_code>> write_chunk_or_rest(std::string_view data,
                                                             error_code& ec) override {
        return inner_.write_chunk_or_rest(data, ec);
    }
    awaitable<error_code> end_stream() override;
    std::optional<awaitable<error_code>> write_last_chunk_or_rest(std::string_view data,
                                                                  error_code& ec) override {
        return inner_.write_last_chunk_or_rest(data, ec);
    }
    void set_request_id(std::string id) override { inner_.set_request_id(std::move(id)); }
    void abort() override { inner_.abort(); }
    bool responded() const override { return inner_.responded(); }
    bool client_gone() const override { return inner_.client_gone(); }

    const std::string& request_id() const noexcept { return request_id_; }
    // The status sent to the client; 0 while nothing was sent.
    unsigned status() const noexcept { return status_; }

private:
    server::Exchange& inner_;
    std::string request_id_;
    unsigned status_ = 0;
};

}  // namespace pdr::api
