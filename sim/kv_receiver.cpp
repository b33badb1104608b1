#include "sim/kv_receiver.hpp"

#include "net/common/log.hpp"
#include "net/common/task_group.hpp"
#include "sim/generation.hpp"
#include "sim/kv_link.hpp"
#include "sim/lmcache_wire.hpp"

#include <array>
#include <system_error>

namespace pdr::sim {

namespace {

constexpr Duration kIoTimeout{10'000};  // per read/write; an idle connection is closed after it
constexpr std::size_t kChunkBytes = 64 * 1024;

}  // namespace

struct KvReceiver::State {
    State(net::any_io_executor e, Duration ttl, std::uint64_t max_bytes)
        : ex(e), tasks(e), inbox(ttl, max_bytes) {}
    net::any_io_executor ex;
    TaskGroup tasks;
    LmcacheInbox inbox;
    std::vector<std::unique_ptr<Acceptor>> acceptors;
    ReceiverCounters counters;
    PdxFrameFn pdx_frame;
};

namespace {

using StatePtr = std::shared_ptr<KvReceiver::State>;

awaitable<void> serve_init(StatePtr s, Socket sock, int rank) {
    KvLink link(std::move(sock), kIoTimeout);
    std::array<unsigned char, kHelloSize> in{};
    auto ec = co_await link.read(in);
    if (ec) {
        co_return;
    }
    auto hello = decode_hello(in);
    Hello reply{rank, HelloStatus::Ok};
    if (!hello) {
        reply.status = HelloStatus::BadHello;
    } else if (hello->rank != rank) {
        reply.status = HelloStatus::WrongRank;
    }
    ++(reply.status == HelloStatus::Ok ? s->counters.handshakes : s->counters.bad_handshakes);
    const auto out = encode_hello(reply);
    co_await link.write(out);
    link.close();
}

// Reads one frame's payload, checking it against the pattern. False when the connection broke.
awaitable<bool> read_payload(KvLink& link, const KvHeader& h, bool& corrupt) {
    const KvPattern pattern(h.key, h.rank, h.tokens, h.block_tokens, h.bytes_per_token);
    std::vector<unsigned char> chunk(
        static_cast<std::size_t>(std::min<std::uint64_t>(kChunkBytes, h.bytes)));
    for (std::uint64_t off = 0; off < h.bytes; off += chunk.size()) {
        const auto n =
            static_cast<std::size_t>(std::min<std::uint64_t>(chunk.size(), h.bytes - off));
        const std::span<unsigned char> part(chunk.data(), n);
        auto ec = co_await link.read(part);
        if (ec) {
            co_return false;
        }
        corrupt = corrupt || !pattern.matches(off, part);
    }
    co_return true;
}

awaitable<void> serve_alloc(StatePtr s, Socket sock, int rank) {
    KvLink link(std::move(sock), kIoTimeout);
    for (;;) {
        std::array<unsigned char, kKvFixedSize> fixed{};
        auto ec = co_await link.read(fixed);
        if (ec) {
            co_return;  // the sender is done (or gone)
        }
        KvHeader h;
        std::size_t id_len = 0;
        auto bad = decode_kv_fixed(fixed, static_cast<std::uint32_t>(kMaxModelLen), h, id_len);
        KvStatus status = KvStatus::Ok;
        if (!bad && h.pdx && !s->pdx_frame) {
            bad = "a transfer-core frame, and this decode runs without the transfer core";
        }
        if (bad) {
            status = KvStatus::BadFrame;
        } else if (h.rank != rank) {
            status = KvStatus::WrongRank;
        } else if (h.bytes > s->inbox.max_bytes()) {
            status = KvStatus::TooLarge;
        }
        if (status != KvStatus::Ok) {
            // Refused before the payload: answer, then close (the rest is not read).
            ++s->counters.frames_rejected;
            PDR_WARN("pdsim", "lmcache: KV frame on rank " + std::to_string(rank) +
                                  " refused: " + (bad ? *bad : std::string(to_string(status))));
            const auto out = encode_ack(KvAck{rank, status});
            co_await link.write(out);
            link.close();
            co_return;
        }
        h.req_id.resize(id_len);
        ec = co_await link.read(
            std::span(reinterpret_cast<unsigned char*>(h.req_id.data()), h.req_id.size()));
        if (!ec && h.pdx) {
            auto served = s->pdx_frame(link, h);
            if (!co_await std::move(served)) {
                co_return;
            }
            continue;
        }
        bool corrupt = false;
        bool whole = false;
        if (!ec) {
            whole = co_await read_payload(link, h, corrupt);
        }
        if (!whole) {
            ++s->counters.frames_rejected;
            co_return;  // cut short: nothing is recorded
        }
        s->inbox.add(KvCopy{h.key, h.rank, h.tokens, h.bytes, corrupt, h.req_id}, Clock::now());
        const auto out = encode_ack(KvAck{rank, corrupt ? KvStatus::Corrupt : KvStatus::Ok});
        ec = co_await link.write(out);
        if (ec) {
            co_return;
        }
    }
}

awaitable<void> accept_loop(StatePtr s, Acceptor& acceptor, int rank, bool init) {
    for (;;) {
        auto [ec, sock] = co_await acceptor.async_accept();
        if (ec == net::error::operation_aborted || !acceptor.is_open()) {
            co_return;
        }
        if (ec) {
            Timer pause(s->ex);  // out of descriptors and the like: back off a little
            pause.expires_after(Duration{100});
            co_await pause.async_wait();
            continue;
        }
        Socket conn(std::move(sock));
        if (init) {
            s->tasks.spawn(serve_init(s, std::move(conn), rank));
        } else {
            s->tasks.spawn(serve_alloc(s, std::move(conn), rank));
        }
    }
}

unsigned short bind_listener(Acceptor& acc, const std::string& host, unsigned short port) {
    tcp::resolver resolver(acc.get_executor());
    error_code ec;
    auto results = resolver.resolve(host, std::to_string(port), ec);
    if (ec || results.empty()) {
        throw std::system_error(std::error_code(ec ? ec : net::error::host_not_found),
                                "lmcache receiver: resolve " + host);
    }
    const tcp::endpoint ep = results.begin()->endpoint();
    acc.open(ep.protocol(), ec);
    if (!ec) {
        acc.set_option(net::socket_base::reuse_address(true), ec);
        acc.bind(ep, ec);
    }
    if (!ec) {
        acc.listen(net::socket_base::max_listen_connections, ec);
    }
    if (ec) {
        throw std::system_error(std::error_code(ec),
                                "lmcache receiver: listen on " + host + ":" + std::to_string(port));
    }
    return acc.local_endpoint().port();
}

}  // namespace

KvReceiver::KvReceiver(net::any_io_executor ex, Duration ttl, std::uint64_t max_bytes)
    : state_(std::make_shared<State>(std::move(ex), ttl, max_bytes)) {}

KvReceiver::~KvReceiver() {
    stop();
}

void KvReceiver::listen(const std::string& host, std::vector<unsigned short>& init_ports,
                        std::vector<unsigned short>& alloc_ports) {
    State& s = *state_;
    for (std::size_t r = 0; r < init_ports.size(); ++r) {
        for (auto* port : {&init_ports[r], &alloc_ports[r]}) {
            s.acceptors.push_back(std::make_unique<Acceptor>(s.ex));
            *port = bind_listener(*s.acceptors.back(), host, *port);
        }
    }
    for (std::size_t i = 0; i < s.acceptors.size(); ++i) {
        s.tasks.spawn(accept_loop(state_, *s.acceptors[i], static_cast<int>(i / 2), i % 2 == 0));
    }
}

void KvReceiver::set_pdx_handler(PdxFrameFn fn) {
    state_->pdx_frame = std::move(fn);
}

void KvReceiver::stop() {
    for (auto& a : state_->acceptors) {
        error_code ignored;
        a->close(ignored);
    }
    state_->tasks.stop();
}

void KvReceiver::reset() {
    state_->inbox.reset();
    state_->counters = ReceiverCounters{};
}

LmcacheInbox& KvReceiver::inbox() noexcept {
    return state_->inbox;
}

const LmcacheInbox& KvReceiver::inbox() const noexcept {
    return state_->inbox;
}

const ReceiverCounters& KvReceiver::counters() const noexcept {
    return state_->counters;
}

}  // namespace pdr::sim
