#include "router/api/tracked_exchange.hpp"

#include "router/disagg/rewrite.hpp"

namespace pdr::api {

awaitable<error_code> TrackedExchange::respond(server::Response res) {
    res.set(kRequestIdHeader, request_id_);
    status_ = res.result_int();
    co_return co_await inner_.respond(std::move(res));
}

awaitable<error_code> TrackedExchange::begin_stream(http::response<http::empty_body> head) {
    head.set(kRequestIdHeader, request_id_);
    status_ = head.result_int();
    co_return co_await inner_.begin_stream(std::move(head));
}

awaitable<error_code> TrackedExchange::begin_stream_held(http::response<http::empty_body> head) {
    head.set(kRequestIdHeader, request_id_);
    status_ = head.result_int();
    co_return co_await inner_.begin_stream_held(std::move(head));
}

// Not coroutines: the inner exchange's awaitable is handed on as it is (one frame less per
// chunk); the caller awaits it at once, while `data` is still valid.
awaitable<error_code> TrackedExchange::write_chunk(std::string_view data) {
    return inner_.write_chunk(data);
}

awaitable<error_code> TrackedExchange::end_stream() {
    return inner_.end_stream();
}

}  // namespace pdr::api
