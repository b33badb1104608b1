// UCX backend. Writes: ucp_put_nbx per merged segment, then ucp_ep_flush_nbx, and the transfer
// completes when the flush is done (puts carry no request or callback of their own; gets do),
// so a Done notification sent afterwards follows data that is visible at the target; or, on
// connections that run over tcp only (WriteProtocol::Auto) or when asked (Am), one active
// message per segment that the target's backend places into its own memory and acknowledges,
// and the transfer completes on the last acknowledgement. Notifications are eager active
// messages. When the transport list may hold shared memory, active messages (notifications, Am
// writes and their acknowledgements) go through a second UCX context and worker with the
// shared-memory transports left out: UCX 1.13's posix/sysv receive FIFO is one per worker,
// shared by every sender on the host, and a sender killed between claiming a slot and marking
// it written stops the reader at that slot for good (every message to this agent, from anyone,
// then stays queued). RMA keeps the shared memory; a killed process can only leave bytes in it.
// UCX calls happen under the agent's lock (worker in SERIALIZED mode); request
// callbacks only record results, which progress() reports after ucp_worker_progress returns.
// Over 500 lines as one class: every write path and callback shares the workers and their maps
// of connections and operations.
#include <ucp/api/ucp.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <span>
#include <unordered_map>
#include <utility>

#include "backend.hpp"
#include "ucx_address.hpp"

namespace pdx {
bool ucx_available() noexcept {
    return true;
}
}  // namespace pdx

namespace pdx::detail {
namespace {

constexpr unsigned kAmId = 0x7d;       // notification
constexpr unsigned kWriteAmId = 0x7e;  // one segment of an Am write: WriteHeader, then the bytes
constexpr unsigned kAckAmId = 0x7f;    // the target's answer to one kWriteAmId message: Ack

// Am write wire formats, little-endian (docs/transfer.md):
//   WriteHeader (16 bytes): u64 sequence (the initiator's operation), u64 destination address
//   Ack (12 bytes):         u64 sequence, i32 ucs_status_t of the placement (0 = placed)
constexpr std::size_t kWriteHeaderBytes = 16;
constexpr std::size_t kAckBytes = 12;
// Notifications taken from the workers in one progress() call (see progress()).
constexpr std::size_t kMessagesPerProgress = 256;
// Am write messages are eager and at most this long (larger segments are split): the target
// gets each one whole inside its callback and copies it there, under the agent's lock, so no
// receive is ever in flight into a region the target might release (rendezvous would be, and
// could not be taken back from a peer that died or froze). Measured over tcp here (one cell
// each, both ends busy-polling): 3.77 / 3.67 / 2.95 GB/s at 64 KiB / 1 MiB / 16 MiB, against
// 2.97 / 4.59 / 4.34 with rendezvous above UCX's threshold (~20 KiB) and 1.5-1.9 for puts.
constexpr std::uint64_t kAmChunkBytes = 256 * 1024;

void store_le(std::byte* p, std::uint64_t v, std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) {
        p[i] = std::byte(std::uint8_t(v >> (8 * i)));
    }
}
std::uint64_t load_le(const std::byte* p, std::size_t n) {
    std::uint64_t v = 0;
    for (std::size_t i = 0; i < n; ++i) {
        v |= std::uint64_t(std::to_integer<std::uint8_t>(p[i])) << (8 * i);
    }
    return v;
}

std::string ucs_message(const char* what, ucs_status_t s) {
    return std::string(what) + ": " + ucs_status_string(s);
}

class UcxBackend;

Status to_status(ucs_status_t s) {
    switch (s) {
        case UCS_OK:
            return Status::Ok;
        case UCS_ERR_ENDPOINT_TIMEOUT:
        case UCS_ERR_CONNECTION_RESET:
        case UCS_ERR_UNREACHABLE:
        case UCS_ERR_REJECTED:
        case UCS_ERR_CANCELED:
            return Status::PeerGone;
        default:
            return Status::Failed;
    }
}

struct Conn {
    std::uint64_t token = 0;
    ucp_ep_h ep = nullptr;          // RMA
    ucp_ep_h mep = nullptr;         // active messages: ep, or one from the message worker
    bool am_write = false;          // writes go as active messages (see WriteProtocol)
    std::vector<ucp_rkey_h> rkeys;  // by remote region index (null: none)
    std::vector<std::vector<std::byte>> packed;  // the packed bytes each of rkeys came from
    std::vector<ucp_rkey_h> retired;
};

struct Op {
    UcxBackend* owner = nullptr;
    std::uint64_t id = 0;
    int pending = 0;  // outstanding UCX requests, plus acknowledgements awaited (Am writes)
    bool posted = false;
    ucs_status_t status = UCS_OK;
    std::uint64_t seq = 0;   // unique per operation: the key acknowledgements come back with
    std::uint64_t conn = 0;  // Am writes: the connection the segments went out on
    std::uint32_t acks = 0;  // Am writes: acknowledgements still awaited (counted in pending)
    std::vector<std::array<std::byte, 16>> headers;  // Am writes: one header per segment
};

struct SendBuf {
    std::vector<std::byte> bytes;
};

class UcxBackend final : public Backend {
public:
    UcxBackend(BackendEvents& ev) : ev_(ev) {}

    std::string init(const BackendOptions& o) {
        write_protocol_ = o.write_protocol;
        std::string tls = o.transports;
        if (tls.empty()) {
            const char* env = std::getenv("UCX_TLS");
            tls = env ? env : "";
        }
        if (auto e = open_worker(o.transports, o.net_devices,
                                 UCP_FEATURE_RMA | UCP_FEATURE_AM | UCP_FEATURE_WAKEUP, context_,
                                 worker_, efd_, address_);
            !e.empty()) {
            return e;
        }
        if (messages_may_use_shm(tls)) {
            // Without a message worker (UCX found nothing to run it on, e.g. a deny list that
            // leaves no network transport) messages share the data worker, as they always did.
            const auto [mtls, mdev] = message_transports(tls, o.net_devices);
            if (!open_worker(mtls, mdev, UCP_FEATURE_AM | UCP_FEATURE_WAKEUP, mcontext_, mworker_,
                             mefd_, maddress_)
                     .empty()) {
                close_message_worker();
            }
        }
        return {};
    }

    void close_message_worker() {
        if (mworker_) {
            ucp_worker_destroy(mworker_);
        }
        if (mcontext_) {
            ucp_cleanup(mcontext_);
        }
        mworker_ = nullptr;
        mcontext_ = nullptr;
        mefd_ = -1;
        maddress_.clear();
    }

    // A context and worker with the given transports; its event fd and address; the active
    // message handlers (both workers answer every message kind: a peer without a message
    // worker sends its messages to the data worker).
    std::string open_worker(const std::string& tls, const std::string& net_devices,
                            std::uint64_t features, ucp_context_h& context, ucp_worker_h& worker,
                            int& efd, std::vector<std::byte>& address) {
        ucp_config_t* config = nullptr;
        ucs_status_t s = ucp_config_read(nullptr, nullptr, &config);
        if (s != UCS_OK) {
            return ucs_message("ucp_config_read", s);
        }
        if (!tls.empty()) {
            ucp_config_modify(config, "TLS", tls.c_str());
        }
        if (!net_devices.empty()) {
            ucp_config_modify(config, "NET_DEVICES", net_devices.c_str());
        }
        ucp_params_t params{};
        params.field_mask = UCP_PARAM_FIELD_FEATURES;
        params.features = features;
        s = ucp_init(&params, config, &context);
        ucp_config_release(config);
        if (s != UCS_OK) {
            return ucs_message("ucp_init", s);
        }
        ucp_worker_params_t wp{};
        wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
        wp.thread_mode = UCS_THREAD_MODE_SERIALIZED;
        s = ucp_worker_create(context, &wp, &worker);
        if (s != UCS_OK) {
            return ucs_message("ucp_worker_create", s);
        }
        s = ucp_worker_get_efd(worker, &efd);
        if (s != UCS_OK) {
            return ucs_message("ucp_worker_get_efd", s);
        }
        ucp_worker_attr_t attr{};
        attr.field_mask = UCP_WORKER_ATTR_FIELD_ADDRESS;
        s = ucp_worker_query(worker, &attr);
        if (s != UCS_OK) {
            return ucs_message("ucp_worker_query", s);
        }
        auto* a = reinterpret_cast<const std::byte*>(attr.address);
        address.assign(a, a + attr.address_length);
        ucp_worker_release_address(worker, attr.address);
        const std::pair<unsigned, ucp_am_recv_callback_t> handlers[] = {
            {kAmId, &UcxBackend::am_cb},
            {kWriteAmId, &UcxBackend::write_am_cb},
            {kAckAmId, &UcxBackend::ack_am_cb}};
        for (const auto& [id, cb] : handlers) {
            ucp_am_handler_param_t hp{};
            hp.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
                            UCP_AM_HANDLER_PARAM_FIELD_ARG | UCP_AM_HANDLER_PARAM_FIELD_FLAGS;
            hp.id = id;
            hp.cb = cb;
            hp.arg = this;
            hp.flags = UCP_AM_FLAG_WHOLE_MSG;
            s = ucp_worker_set_am_recv_handler(worker, &hp);
            if (s != UCS_OK) {
                return ucs_message("ucp_worker_set_am_recv_handler", s);
            }
        }
        return {};
    }

    ~UcxBackend() override {
        // A backend whose init() failed may have no worker (e.g. UCX found no usable transport):
        // then there is nothing to drain or close, only the contexts to clean up.
        if (worker_) {
            // Let pending wire-up traffic drain first (UCX 1.13 asserts when a worker is
            // destroyed with a wire-up reply still queued on a tcp endpoint); bounded for dead
            // peers.
            drain_worker(worker_, std::chrono::milliseconds(300));
            if (mworker_) {
                drain_worker(mworker_, std::chrono::milliseconds(300));
            }
            for (auto& [t, c] : conns_) {
                close_conn(*c, Close::Abort);
            }
            conns_.clear();
            last_conn_ = nullptr;
            for (int i = 0; i < 100000 && !closing_.empty(); ++i) {
                progress_workers();
                reap_closing();
            }
            // Graceful closes still waiting for a stopped peer: the worker goes with them.
            for (auto& c : closing_) {
                ucp_request_free(c.request);
                for (auto k : c.rkeys) {
                    ucp_rkey_destroy(k);
                }
            }
            closing_.clear();
        }
        close_message_worker();
        if (worker_) {
            ucp_worker_destroy(worker_);
        }
        if (context_) {
            ucp_cleanup(context_);
        }
        // ops_ is freed after this body: also the records of requests that UCX never completed
        // (e.g. gets to a peer that was killed while frozen), which used to leak.
    }

    Result<LocalRegion> allocate(std::size_t bytes) override { return map(nullptr, bytes); }
    Result<LocalRegion> register_memory(void* data, std::size_t bytes) override {
        return map(data, bytes);
    }
    void release(LocalRegion& r) override {
        // one entry only: the same memory may be registered twice, and the other stays live
        auto m = std::find(mine_.begin(), mine_.end(), std::pair{r.base, r.size});
        if (m != mine_.end()) {
            mine_.erase(m);
        }
        if (r.handle) {
            ucp_mem_unmap(context_, static_cast<ucp_mem_h>(r.handle));
        }
        r.handle = nullptr;
        r.base = nullptr;
    }
    std::vector<std::byte> address() const override { return frame_addresses(address_, maddress_); }

    Result<std::uint64_t> connect(const ConnectParams& p) override {
        std::span<const std::byte> data, messages;
        if (!unframe_addresses(p.address, data, messages)) {
            return {Status::Invalid, "ucx: malformed backend address"};
        }
        auto c = std::make_unique<Conn>();
        c->token = ++next_conn_;
        ucp_ep_params_t ep{};
        ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                        UCP_EP_PARAM_FIELD_ERR_HANDLER;
        ep.address = reinterpret_cast<const ucp_address_t*>(data.data());
        ep.err_mode = p.peer_error_mode ? UCP_ERR_HANDLING_MODE_PEER : UCP_ERR_HANDLING_MODE_NONE;
        ep.err_handler.cb = &UcxBackend::ep_err_cb;
        // The backend, not the Conn: UCX may still report an error for an endpoint after
        // close_conn() (a forced close completes later) and the Conn is gone by then.
        ep.err_handler.arg = this;
        ucs_status_t s = ucp_ep_create(worker_, &ep, &c->ep);
        if (s != UCS_OK) {
            return {Status::Failed, ucs_message("ucp_ep_create", s)};
        }
        c->mep = c->ep;
        if (mworker_) {
            // Messages from our message worker: to the peer's (or, if it has none, to its only
            // worker, which then holds no shared memory either).
            ep.address = reinterpret_cast<const ucp_address_t*>(messages.empty() ? data.data()
                                                                                 : messages.data());
            if (ucp_ep_create(mworker_, &ep, &c->mep) != UCS_OK) {
                c->mep = c->ep;  // no common message transport: the data endpoint carries them
            }
        }
        c->am_write = write_protocol_ == WriteProtocol::Am ||
                      (write_protocol_ == WriteProtocol::Auto && tcp_only(c->ep));
        std::uint64_t token = c->token;
        conns_[token] = std::move(c);
        auto u = update_regions(token, *p.regions);
        if (!u) {
            disconnect(token, Close::Abort);
            return {u.status(), u.message()};
        }
        return token;
    }

    Result<void> update_regions(std::uint64_t conn, const std::vector<RemoteRegion>& r) override {
        auto it = conns_.find(conn);
        if (it == conns_.end()) {
            return {Status::NotFound, "ucx: unknown connection"};
        }
        Conn& c = *it->second;
        // A region whose packed rkey is unchanged (e.g. add_peer again with the same
        // descriptor) keeps its unpacked key: unpacking maps the peer's memory again (over
        // posix shm the whole region), so a refresh must not cost a new key per region.
        auto same = [&](std::size_t i) {
            return i < c.rkeys.size() && c.rkeys[i] && c.packed[i] == r[i].rkey;
        };
        std::vector<ucp_rkey_h> keys(r.size(), nullptr);
        for (std::size_t i = 0; i < r.size(); ++i) {
            if (r[i].rkey.empty() || same(i)) {
                continue;
            }
            ucs_status_t s = ucp_ep_rkey_unpack(c.ep, r[i].rkey.data(), &keys[i]);
            if (s != UCS_OK) {
                for (auto k : keys) {
                    if (k) {
                        ucp_rkey_destroy(k);
                    }
                }
                return {Status::Invalid, ucs_message("ucp_ep_rkey_unpack", s)};
            }
        }
        std::vector<std::vector<std::byte>> packed(r.size());
        for (std::size_t i = 0; i < r.size(); ++i) {
            if (same(i)) {
                keys[i] = c.rkeys[i];
                c.rkeys[i] = nullptr;  // kept, not retired below
            }
            if (keys[i]) {
                packed[i] = r[i].rkey;
            }
        }
        // operations in flight may still use the replaced keys: retire them until the close
        for (auto k : c.rkeys) {
            if (k) {
                c.retired.push_back(k);
            }
        }
        c.rkeys = std::move(keys);
        c.packed = std::move(packed);
        return {};
    }

    bool disconnect(std::uint64_t conn, Close how) override {
        auto it = conns_.find(conn);
        if (it == conns_.end()) {
            return true;
        }
        last_conn_ = nullptr;
        close_conn(*it->second, how);
        conns_.erase(it);
        return how == Close::Abort;
    }

    Result<void> post(std::uint64_t conn, Direction dir, const LocalRegion& local,
                      std::uint32_t remote_region, std::span<const Segment> segments,
                      std::uint64_t op_id, bool* done_inline) override {
        Conn* cp = find_conn(conn);
        if (!cp) {
            return {Status::PeerGone, "ucx: connection closed"};
        }
        Conn& c = *cp;
        if (remote_region >= c.rkeys.size() || !c.rkeys[remote_region]) {
            return {Status::Invalid, "ucx: no rkey for remote region"};
        }
        ucp_rkey_h rkey = c.rkeys[remote_region];
        Op* op = new_op(op_id);
        ucp_request_param_t rp{};
        rp.memh = static_cast<ucp_mem_h>(local.handle);
        if (dir == Direction::Write && c.am_write) {
            post_am_write(c, op, rp, segments);
        } else if (dir == Direction::Write) {
            // No request or callback per put: the flush below completes after every put.
            rp.op_attr_mask = UCP_OP_ATTR_FIELD_MEMH;
            if (segments.size() > 1) {
                rp.op_attr_mask |= UCP_OP_ATTR_FLAG_MULTI_SEND;
            }
            for (const auto& s : segments) {
                ucs_status_ptr_t r = ucp_put_nbx(c.ep, reinterpret_cast<void*>(s.local_addr),
                                                 s.bytes, s.remote_addr, rkey, &rp);
                if (UCS_PTR_IS_ERR(r)) {
                    op->status = UCS_PTR_STATUS(r);
                    break;
                }
                if (r != nullptr) {
                    ucp_request_free(r);  // released by UCX when the put completes
                }
            }
        } else {
            rp.op_attr_mask =
                UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_MEMH;
            rp.cb.send = &UcxBackend::op_cb;
            rp.user_data = op;
            for (const auto& s : segments) {
                if (!track(op, ucp_get_nbx(c.ep, reinterpret_cast<void*>(s.local_addr), s.bytes,
                                           s.remote_addr, rkey, &rp))) {
                    break;
                }
            }
        }
        if (op->status == UCS_OK && !(dir == Direction::Write && c.am_write)) {
            ucp_request_param_t fp{};
            fp.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
            fp.cb.send = &UcxBackend::op_cb;
            fp.user_data = op;
            track(op, ucp_ep_flush_nbx(c.ep, &fp));
        }
        // Read before the store to `posted`: a load spanning a byte just stored cannot be
        // forwarded from the store buffer and waits for every older store to commit, the whole
        // copy a shm put just issued included (measured: the bookkeeping after it then no
        // longer overlaps the copy's write-back).
        const int pending = op->pending;
        const bool failed = op->status != UCS_OK;
        op->posted = true;
        kicked_ = kicked_ || pending > 0;  // one progress round before the worker is armed
        if (done_inline && pending == 0 && !failed) {
            *done_inline = true;  // no completion to queue and deliver
            free_ops_.push_back(op);
            return {};
        }
        maybe_done(op);
        return {};
    }

    Result<void> send(std::uint64_t conn, std::vector<std::byte> message) override {
        auto it = conns_.find(conn);
        if (it == conns_.end()) {
            return {Status::PeerGone, "ucx: connection closed"};
        }
        ucs_status_t s = send_eager(it->second->mep, kAmId, std::move(message));
        if (s != UCS_OK) {
            return {Status::Failed, ucs_message("ucp_am_send_nbx", s)};
        }
        return {};
    }

    std::size_t progress() override {
        kicked_ = false;
        std::size_t n = 0;
        // Bounded by the messages taken, not only by the calls: under a flood one call could
        // otherwise read for seconds (GBs queued here), holding the agent's lock, with no tick
        // (heartbeats, peer timeouts, process watches) and no other peer's turn in between.
        // What stays unread stays in the socket, so TCP holds the flooding sender back.
        for (int i = 0;
             i < 4096 && messages_.size() < kMessagesPerProgress && progress_workers() != 0; ++i) {
            ++n;
        }
        reap_closing();
        // Order of arrival: messages received this round came before the connection errors
        // (a Done sent just before the peer exited must still be attributed to that peer), and
        // errors before completions, so operations that failed with them end as PeerGone.
        auto messages = std::move(messages_);
        messages_.clear();
        for (auto& m : messages) {
            ev_.on_message(m);
        }
        auto errors = std::move(errors_);
        errors_.clear();
        for (auto& [token, st] : errors) {
            if (conns_.count(token)) {
                ev_.on_conn_error(token, ucs_status_string(st));
            }
        }
        n += messages.size() + errors.size() + deliver_completed();
        return n;
    }
    std::size_t deliver_completed() override {
        if (done_.empty()) {
            return 0;
        }
        // done_ and spare_done_ trade places, so neither list reallocates per transfer.
        auto done = std::move(done_);
        done_ = std::move(spare_done_);
        done_.clear();
        for (auto& [id, st] : done) {
            ev_.on_op_complete(id, to_status(st),
                               st == UCS_OK ? std::string() : ucs_message("ucx transfer", st));
        }
        const std::size_t n = done.size();
        done.clear();
        spare_done_ = std::move(done);
        return n;
    }
    bool busy() const override { return kicked_ || !done_.empty(); }
    bool am_writes(std::uint64_t conn) const override {
        auto it = conns_.find(conn);
        return it != conns_.end() && it->second->am_write;
    }
    int event_fd() const override { return efd_; }
    int message_event_fd() const override { return mefd_; }
    bool arm() override {
        if (!done_.empty() || !errors_.empty() || !messages_.empty()) {
            return false;
        }
        return ucp_worker_arm(worker_) == UCS_OK &&
               (mworker_ == nullptr || ucp_worker_arm(mworker_) == UCS_OK);
    }

private:
    // True if every lane of the endpoint is a tcp one (ucp_ep_print_info is UCX 1.13's only
    // view of the lanes; its lane lines read "lane[i]:  n:tcp/lo.0 md[..] -> ...").
    static bool tcp_only(ucp_ep_h ep) {
        char* text = nullptr;
        std::size_t len = 0;
        FILE* f = open_memstream(&text, &len);
        if (!f) {
            return false;
        }
        ucp_ep_print_info(ep, f);
        std::fclose(f);
        std::string info(text ? text : "", len);
        std::free(text);
        std::size_t lanes = 0, tcp = 0;
        for (std::size_t at = info.find("lane["); at != std::string::npos;
             at = info.find("lane[", at + 1)) {
            const std::size_t eol = info.find('\n', at);
            const std::string line = info.substr(at, eol == std::string::npos ? eol : eol - at);
            ++lanes;
            if (line.find(":tcp/") != std::string::npos) {
                ++tcp;
            }
        }
        return lanes > 0 && lanes == tcp;
    }

    // One eager active message per segment, or per kAmChunkBytes of a longer one (the header
    // names the destination); the target answers each with an Ack once the bytes are in its
    // memory. The operation waits for the sends (the source must stay untouched until then)
    // and for every Ack.
    void post_am_write(Conn& c, Op* op, ucp_request_param_t& rp,
                       std::span<const Segment> segments) {
        // (the memory handle is the data context's: not for the message worker's endpoints)
        rp.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                          UCP_OP_ATTR_FIELD_FLAGS | (c.mep == c.ep ? UCP_OP_ATTR_FIELD_MEMH : 0);
        rp.flags = UCP_AM_SEND_FLAG_REPLY | UCP_AM_SEND_FLAG_EAGER;
        rp.cb.send = &UcxBackend::op_cb;
        rp.user_data = op;
        op->conn = c.token;
        std::size_t messages = 0;
        for (const auto& s : segments) {
            messages += static_cast<std::size_t>((s.bytes + kAmChunkBytes - 1) / kAmChunkBytes);
        }
        // UCX may keep a header until its send completes: one slot per message, kept with the
        // operation (reused by the next one that takes this record), never reallocated here.
        op->headers.reserve(messages);
        for (const auto& s : segments) {
            for (std::uint64_t off = 0; off < s.bytes; off += kAmChunkBytes) {
                op->headers.emplace_back();
                std::byte* h = op->headers.back().data();
                store_le(h, op->seq, 8);
                store_le(h + 8, s.remote_addr + off, 8);
                ++op->acks;
                ++op->pending;
                const std::uint64_t len = std::min(kAmChunkBytes, s.bytes - off);
                if (!track(op, ucp_am_send_nbx(c.mep, kWriteAmId, h, kWriteHeaderBytes,
                                               reinterpret_cast<void*>(s.local_addr + off), len,
                                               &rp))) {
                    --op->acks;  // never sent: no answer will come
                    --op->pending;
                    break;
                }
            }
            if (op->status != UCS_OK) {
                break;
            }
        }
        if (op->acks > 0) {
            awaiting_[op->seq] = op;
        }
    }

    // Target: the destination [addr, addr + bytes) must lie in one of this agent's regions.
    bool owns(std::uint64_t addr, std::size_t bytes) const {
        for (const auto& [base, size] : mine_) {
            const auto b = reinterpret_cast<std::uint64_t>(base);
            if (addr >= b && bytes <= size && addr - b <= size - bytes) {
                return true;
            }
        }
        return false;
    }
    // An eager active message with no AM header; the bytes live until the send completes.
    ucs_status_t send_eager(ucp_ep_h ep, unsigned id, std::vector<std::byte> bytes) {
        auto* sb = new SendBuf{std::move(bytes)};
        ucp_request_param_t rp{};
        rp.op_attr_mask =
            UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_FLAGS;
        rp.flags = UCP_AM_SEND_FLAG_EAGER;
        rp.cb.send = &UcxBackend::send_cb;
        rp.user_data = sb;
        ucs_status_ptr_t r =
            ucp_am_send_nbx(ep, id, nullptr, 0, sb->bytes.data(), sb->bytes.size(), &rp);
        if (r == nullptr || UCS_PTR_IS_ERR(r)) {
            delete sb;
            return UCS_PTR_STATUS(r);
        }
        kicked_ = true;  // the send needs progress to finish
        return UCS_OK;
    }
    // Failures are not reported: the initiator is gone, and its deadline ends the write anyway.
    void send_ack(ucp_ep_h reply, std::uint64_t seq, ucs_status_t status) {
        if (!reply) {
            return;
        }
        std::vector<std::byte> ack(kAckBytes);
        store_le(ack.data(), seq, 8);
        store_le(ack.data() + 8, static_cast<std::uint32_t>(status), 4);
        send_eager(reply, kAckAmId, std::move(ack));
    }
    // Initiator: an Ack for one segment of an Am write.
    void on_ack(std::uint64_t seq, ucs_status_t status) {
        auto it = awaiting_.find(seq);
        if (it == awaiting_.end()) {
            return;  // its connection was closed: the operation already ended
        }
        Op* op = it->second;
        if (status != UCS_OK && op->status == UCS_OK) {
            op->status = status;
        }
        --op->pending;
        if (--op->acks == 0) {
            awaiting_.erase(it);
        }
        maybe_done(op);
    }
    // Operations on a closing connection stop waiting for Acks (their sends are canceled by
    // the close; no Ack can be told from a late one of a later life of the peer).
    void forget_acks(std::uint64_t token) {
        for (auto it = awaiting_.begin(); it != awaiting_.end();) {
            Op* op = it->second;
            if (op->conn != token) {
                ++it;
                continue;
            }
            op->pending -= static_cast<int>(op->acks);
            op->acks = 0;
            if (op->status == UCS_OK) {
                op->status = UCS_ERR_CANCELED;
            }
            it = awaiting_.erase(it);
            maybe_done(op);
        }
    }

    Result<LocalRegion> map(void* data, std::size_t bytes) {
        ucp_mem_map_params_t mp{};
        mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH |
                        UCP_MEM_MAP_PARAM_FIELD_FLAGS;
        mp.address = data;
        mp.length = bytes;
        mp.flags = data ? 0 : UCP_MEM_MAP_ALLOCATE;
        ucp_mem_h memh = nullptr;
        ucs_status_t s = ucp_mem_map(context_, &mp, &memh);
        if (s != UCS_OK) {
            return {Status::Failed, ucs_message("ucp_mem_map", s)};
        }
        ucp_mem_attr_t ma{};
        ma.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS | UCP_MEM_ATTR_FIELD_LENGTH;
        s = ucp_mem_query(memh, &ma);
        void* rkey_buf = nullptr;
        std::size_t rkey_len = 0;
        if (s == UCS_OK) {
            s = ucp_rkey_pack(context_, memh, &rkey_buf, &rkey_len);
        }
        if (s != UCS_OK) {
            ucp_mem_unmap(context_, memh);
            return {Status::Failed, ucs_message("ucp_mem_query/rkey_pack", s)};
        }
        LocalRegion r;
        r.base = static_cast<std::byte*>(ma.address);
        r.size = bytes;
        auto* k = static_cast<const std::byte*>(rkey_buf);
        r.rkey.assign(k, k + rkey_len);
        ucp_rkey_buffer_release(rkey_buf);
        r.handle = memh;
        r.owned = data == nullptr;
        if (r.owned) {
            std::memset(r.base, 0, bytes);
        }
        mine_.emplace_back(r.base, bytes);
        return r;
    }

    void drain_worker(ucp_worker_h worker, std::chrono::milliseconds limit) {
        ucp_request_param_t fp{};
        ucs_status_ptr_t r = ucp_worker_flush_nbx(worker, &fp);
        if (r == nullptr || UCS_PTR_IS_ERR(r)) {
            return;
        }
        auto until = std::chrono::steady_clock::now() + limit;
        while (ucp_request_check_status(r) == UCS_INPROGRESS &&
               std::chrono::steady_clock::now() < until) {
            ucp_worker_progress(worker);
        }
        if (ucp_request_check_status(r) == UCS_INPROGRESS) {
            ucp_request_cancel(worker, r);
        }
        ucp_request_free(r);
    }
    // One progress call on each worker: the number of events they reported together.
    unsigned progress_workers() {
        unsigned n = ucp_worker_progress(worker_);
        if (mworker_ != nullptr) {
            n += ucp_worker_progress(mworker_);
        }
        return n;
    }

    // The connection of a token; the last one found is cached (posts usually go to one peer).
    Conn* find_conn(std::uint64_t token) {
        if (last_conn_ && last_conn_->token == token) {
            return last_conn_;
        }
        auto it = conns_.find(token);
        if (it == conns_.end()) {
            return nullptr;
        }
        last_conn_ = it->second.get();
        return last_conn_;
    }
    // Returns false if the operation failed immediately.
    bool track(Op* op, ucs_status_ptr_t r) {
        if (r == nullptr) {
            return true;
        }
        if (UCS_PTR_IS_ERR(r)) {
            op->status = UCS_PTR_STATUS(r);
            return false;
        }
        ++op->pending;
        return true;
    }
    void maybe_done(Op* op) {
        if (!op->posted || op->pending > 0) {
            return;
        }
        done_.emplace_back(op->id, op->status);
        free_ops_.push_back(op);  // reused by the next post: no allocation per transfer
    }
    Op* new_op(std::uint64_t id) {
        Op* op = nullptr;
        if (free_ops_.empty()) {
            ops_.push_back(std::make_unique<Op>());
            op = ops_.back().get();
        } else {
            op = free_ops_.back();
            free_ops_.pop_back();
        }
        op->owner = this;
        op->id = id;
        op->pending = 0;
        op->posted = false;
        op->status = UCS_OK;
        op->seq = ++next_seq_;
        op->conn = 0;
        op->acks = 0;
        op->headers.clear();  // keeps its capacity
        return op;
    }
    // Abort: UCP_EP_CLOSE_FLAG_FORCE, which cancels every request on the endpoint at once.
    // Graceful: a flushing close; requests already posted run on (they may still use the
    // remote keys, kept until the close completes). A forced close of an endpoint whose peer
    // is only stopped crashed the survivor when the peer resumed and closed its own side
    // (UCX 1.13.1, tcp: uct_tcp_iface_progress called a freed endpoint's handler; 8 of 9 runs
    // in the issue, 3 of 4 here), so only peers known dead are aborted.
    void close_conn(Conn& c, Close how) {
        forget_acks(c.token);
        std::vector<ucp_rkey_h> keys;
        for (auto k : c.rkeys) {
            if (k) {
                keys.push_back(k);
            }
        }
        keys.insert(keys.end(), c.retired.begin(), c.retired.end());
        c.rkeys.clear();
        c.packed.clear();
        c.retired.clear();
        ucp_request_param_t rp{};
        rp.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
        rp.flags = how == Close::Abort ? UCP_EP_CLOSE_FLAG_FORCE : 0;
        if (c.mep != c.ep) {
            ucs_status_ptr_t m = ucp_ep_close_nbx(c.mep, &rp);
            if (m && !UCS_PTR_IS_ERR(m)) {
                closing_.push_back({m, {}});
            }
        }
        c.mep = nullptr;
        ucs_status_ptr_t r = ucp_ep_close_nbx(c.ep, &rp);
        c.ep = nullptr;
        if (how == Close::Graceful && r && !UCS_PTR_IS_ERR(r)) {
            closing_.push_back({r, std::move(keys)});
            return;
        }
        for (auto k : keys) {
            ucp_rkey_destroy(k);
        }
        if (r && !UCS_PTR_IS_ERR(r)) {
            closing_.push_back({r, {}});
        }
    }
    void reap_closing() {
        std::erase_if(closing_, [](Closing& c) {
            if (ucp_request_check_status(c.request) == UCS_INPROGRESS) {
                return false;
            }
            ucp_request_free(c.request);
            for (auto k : c.rkeys) {
                ucp_rkey_destroy(k);
            }
            return true;
        });
    }

    static void op_cb(void* request, ucs_status_t status, void* user_data) {
        auto* op = static_cast<Op*>(user_data);
        if (status != UCS_OK && op->status == UCS_OK) {
            op->status = status;
        }
        --op->pending;
        ucp_request_free(request);
        op->owner->maybe_done(op);
    }
    static void send_cb(void* request, ucs_status_t, void* user_data) {
        delete static_cast<SendBuf*>(user_data);
        ucp_request_free(request);
    }
    static void ep_err_cb(void* arg, ucp_ep_h ep, ucs_status_t status) {
        // Found by its endpoint among the open connections (errors are rare; peers are few):
        // an endpoint already closed is no longer there and its late error is dropped.
        auto* self = static_cast<UcxBackend*>(arg);
        for (auto& [token, c] : self->conns_) {
            if ((c->ep == ep || c->mep == ep) && ep != nullptr) {
                self->errors_.emplace_back(token, status);
                return;
            }
        }
    }
    // Target: one message of an Am write, whole (eager): copied into the destination here,
    // under the agent's lock (release_region cannot interleave), then acknowledged.
    static ucs_status_t write_am_cb(void* arg, const void* header, size_t header_length, void* data,
                                    size_t length, const ucp_am_recv_param_t* param) {
        auto* self = static_cast<UcxBackend*>(arg);
        const bool rndv = (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0;
        const ucp_ep_h reply =
            (param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) ? param->reply_ep : nullptr;
        if (header_length != kWriteHeaderBytes) {
            return rndv ? UCS_ERR_INVALID_PARAM : UCS_OK;  // not ours to answer: dropped
        }
        const auto* h = static_cast<const std::byte*>(header);
        const std::uint64_t seq = load_le(h, 8);
        const std::uint64_t addr = load_le(h + 8, 8);
        // Rendezvous is refused (our writers never send it): its data would still be in
        // flight after this returns. The sender's send then fails with the same status.
        const ucs_status_t s = rndv                        ? UCS_ERR_UNSUPPORTED
                               : !self->owns(addr, length) ? UCS_ERR_INVALID_ADDR
                                                           : UCS_OK;
        if (s == UCS_OK) {
            std::memcpy(reinterpret_cast<void*>(addr), data, length);
        }
        self->send_ack(reply, seq, s);
        return rndv ? s : UCS_OK;
    }
    static ucs_status_t ack_am_cb(void* arg, const void*, size_t, void* data, size_t length,
                                  const ucp_am_recv_param_t* param) {
        if ((param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) || length != kAckBytes) {
            return UCS_OK;  // never sent by us
        }
        const auto* p = static_cast<const std::byte*>(data);
        static_cast<UcxBackend*>(arg)->on_ack(
            load_le(p, 8), static_cast<ucs_status_t>(static_cast<std::int32_t>(load_le(p + 8, 4))));
        return UCS_OK;
    }
    static ucs_status_t am_cb(void* arg, const void*, size_t, void* data, size_t length,
                              const ucp_am_recv_param_t* param) {
        auto* self = static_cast<UcxBackend*>(arg);
        if (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) {
            return UCS_OK;  // never sent by us
        }
        auto* p = static_cast<const std::byte*>(data);
        self->messages_.emplace_back(p, p + length);
        return UCS_OK;
    }

    BackendEvents& ev_;
    ucp_context_h context_ = nullptr;
    ucp_worker_h worker_ = nullptr;
    int efd_ = -1;
    std::vector<std::byte> address_;
    // The message context and worker (null: messages share the data worker).
    ucp_context_h mcontext_ = nullptr;
    ucp_worker_h mworker_ = nullptr;
    int mefd_ = -1;
    std::vector<std::byte> maddress_;
    std::unordered_map<std::uint64_t, std::unique_ptr<Conn>> conns_;
    std::uint64_t next_conn_ = 0;
    struct Closing {
        void* request = nullptr;
        std::vector<ucp_rkey_h> rkeys;  // destroyed once the close completed
    };
    std::vector<Closing> closing_;
    std::vector<std::pair<std::uint64_t, ucs_status_t>> done_;
    std::vector<std::pair<std::uint64_t, ucs_status_t>> spare_done_;
    std::vector<std::unique_ptr<Op>> ops_;  // every operation record (peak in flight)
    std::vector<Op*> free_ops_;             // finished ones, reused by the next post
    Conn* last_conn_ = nullptr;             // find_conn()'s cache; reset when any connection closes
    std::vector<std::pair<std::uint64_t, ucs_status_t>> errors_;
    std::vector<std::vector<std::byte>> messages_;
    bool kicked_ = false;  // work was queued in UCX since the last progress()
    WriteProtocol write_protocol_ = WriteProtocol::Auto;
    std::uint64_t next_seq_ = 0;
    std::unordered_map<std::uint64_t, Op*> awaiting_;       // Am writes by sequence: Acks due
    std::vector<std::pair<std::byte*, std::size_t>> mine_;  // local regions (Am write targets)
};

}  // namespace

std::unique_ptr<Backend> make_ucx_backend(const BackendOptions& o, BackendEvents& ev,
                                          std::string& error) {
    auto b = std::make_unique<UcxBackend>(ev);
    error = b->init(o);
    if (!error.empty()) {
        return nullptr;
    }
    return b;
}

}  // namespace pdx::detail
