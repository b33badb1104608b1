// In-process backend: agents of one process find each other in a registry keyed by instance
// nonce. A data operation is queued to the TARGET and executed (memcpy) when the target
// progresses, like UCX over tcp, so a target that does not progress stalls its initiators.
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <limits>
#include <mutex>
#include <new>
#include <string>
#include <unordered_map>
#include <variant>

#include "backend.hpp"

namespace pdx::detail {
namespace {

class LoopbackBackend;

struct DataOp {
    std::uint64_t initiator = 0;
    std::uint64_t conn = 0;  // initiator's connection token
    std::uint64_t op = 0;
    Direction dir = Direction::Write;
    std::vector<Segment> segments;
};
struct OpDone {
    std::uint64_t op = 0;
    Status status = Status::Ok;
    std::string message;
};
struct Message {
    std::vector<std::byte> bytes;
};
struct ConnError {
    std::uint64_t conn = 0;
};
using Task = std::variant<DataOp, OpDone, Message, ConnError>;

// One lock for the registry and every inbox; memcpy runs under it so a destroyed agent's
// memory is never touched after it unregistered.
std::mutex g_mu;
std::unordered_map<std::uint64_t, LoopbackBackend*> g_agents;

struct Conn {
    std::uint64_t target = 0;
    std::vector<RemoteRegion> regions;
};

class LoopbackBackend final : public Backend {
public:
    LoopbackBackend(const BackendOptions& o, BackendEvents& ev) : instance_(o.instance), ev_(ev) {
        efd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        std::lock_guard lk(g_mu);
        g_agents[instance_] = this;
    }
    ~LoopbackBackend() override {
        std::lock_guard lk(g_mu);
        g_agents.erase(instance_);
        for (auto& [id, other] : g_agents) {
            // drop our queued operations at targets; fail operations queued at us
            std::erase_if(other->inbox_, [&](const Task& t) {
                auto* d = std::get_if<DataOp>(&t);
                return d && d->initiator == instance_;
            });
            // every connection of `other` that points at us reports an error
            for (auto& [token, c] : other->conns_) {
                if (c.target == instance_) {
                    other->push_locked(ConnError{token});
                }
            }
        }
        for (auto& t : inbox_) {
            if (auto* d = std::get_if<DataOp>(&t)) {
                auto it = g_agents.find(d->initiator);
                if (it != g_agents.end()) {
                    it->second->push_locked(OpDone{d->op, Status::PeerGone, "peer destroyed"});
                }
            }
        }
        if (efd_ >= 0) {
            ::close(efd_);
        }
    }

    Result<LocalRegion> allocate(std::size_t bytes) override {
        if (bytes == 0) {
            return {Status::Invalid, "zero-sized region"};
        }
        // The aligned operator new rounds the size up to the alignment: near SIZE_MAX that
        // wraps to a small block.
        if (bytes > std::numeric_limits<std::size_t>::max() / 2) {
            return {Status::Invalid, "region too large"};
        }
        std::byte* p = nullptr;
        try {
            p = static_cast<std::byte*>(::operator new(bytes, std::align_val_t{4096}));
        } catch (const std::bad_alloc&) {
            return {Status::Failed,
                    "out of memory for a region of " + std::to_string(bytes) + " bytes"};
        }
        std::memset(p, 0, bytes);
        LocalRegion r;
        r.base = p;
        r.size = bytes;
        r.owned = true;
        std::lock_guard lk(g_mu);
        live_.push_back({p, bytes});
        return r;
    }
    Result<LocalRegion> register_memory(void* data, std::size_t bytes) override {
        LocalRegion r;
        r.base = static_cast<std::byte*>(data);
        r.size = bytes;
        std::lock_guard lk(g_mu);
        live_.push_back({r.base, bytes});
        return r;
    }
    void release(LocalRegion& r) override {
        {
            // under g_mu: a queued operation runs either before this or against the new list
            std::lock_guard lk(g_mu);
            auto it = std::find_if(live_.begin(), live_.end(), [&](const Range& x) {
                return x.base == r.base && x.size == r.size;
            });
            if (it != live_.end()) {
                live_.erase(it);
            }
        }
        if (r.owned && r.base) {
            ::operator delete(r.base, std::align_val_t{4096});
        }
        r.base = nullptr;
    }
    std::vector<std::byte> address() const override {
        std::vector<std::byte> a(8);
        for (int i = 0; i < 8; ++i) {
            a[i] = std::byte(static_cast<std::uint8_t>(instance_ >> (8 * i)));
        }
        return a;
    }

    Result<std::uint64_t> connect(const ConnectParams& p) override {
        if (p.address.size() != 8) {
            return {Status::Invalid, "loopback: bad address"};
        }
        std::uint64_t target = 0;
        for (int i = 0; i < 8; ++i) {
            target |= std::uint64_t(std::to_integer<std::uint8_t>(p.address[i])) << (8 * i);
        }
        std::lock_guard lk(g_mu);
        if (!g_agents.count(target)) {
            return {Status::PeerGone, "loopback: no such agent in process"};
        }
        std::uint64_t token = ++next_conn_;
        conns_[token] = Conn{target, *p.regions};
        return token;
    }
    Result<void> update_regions(std::uint64_t conn, const std::vector<RemoteRegion>& r) override {
        std::lock_guard lk(g_mu);
        auto it = conns_.find(conn);
        if (it == conns_.end()) {
            return {Status::NotFound, "loopback: unknown connection"};
        }
        it->second.regions = r;
        return {};
    }
    // Queued operations are dropped either way (they run only when the target progresses).
    bool disconnect(std::uint64_t conn, Close /*how*/) override {
        std::lock_guard lk(g_mu);
        auto it = conns_.find(conn);
        if (it == conns_.end()) {
            return true;
        }
        auto target = g_agents.find(it->second.target);
        if (target != g_agents.end()) {
            std::erase_if(target->second->inbox_, [&](const Task& t) {
                auto* d = std::get_if<DataOp>(&t);
                return d && d->initiator == instance_ && d->conn == conn;
            });
        }
        conns_.erase(it);
        return true;
    }

    Result<void> post(std::uint64_t conn, Direction dir, const LocalRegion&,
                      std::uint32_t remote_region, std::span<const Segment> segments,
                      std::uint64_t op, bool* /*done_inline*/) override {
        std::lock_guard lk(g_mu);
        auto c = conns_.find(conn);
        if (c == conns_.end()) {
            return {Status::PeerGone, "loopback: connection closed"};
        }
        if (remote_region >= c->second.regions.size() ||
            c->second.regions[remote_region].size == 0) {
            return {Status::Invalid, "loopback: the peer released the remote region"};
        }
        auto t = g_agents.find(c->second.target);
        if (t == g_agents.end()) {
            return {Status::PeerGone, "loopback: peer destroyed"};
        }
        t->second->push_locked(DataOp{instance_, conn, op, dir,
                                      std::vector<Segment>(segments.begin(), segments.end())});
        return {};
    }
    Result<void> send(std::uint64_t conn, std::vector<std::byte> message) override {
        std::lock_guard lk(g_mu);
        auto c = conns_.find(conn);
        if (c == conns_.end()) {
            return {Status::PeerGone, "loopback: connection closed"};
        }
        auto t = g_agents.find(c->second.target);
        if (t == g_agents.end()) {
            return {Status::PeerGone, "loopback: peer destroyed"};
        }
        t->second->push_locked(Message{std::move(message)});
        return {};
    }

    std::size_t progress() override {
        std::uint64_t v;
        while (::read(efd_, &v, sizeof v) > 0) {
        }
        std::deque<Task> local;
        {
            std::lock_guard lk(g_mu);
            for (auto& t : inbox_) {
                if (auto* d = std::get_if<DataOp>(&t)) {
                    execute_locked(*d);
                } else {
                    local.push_back(std::move(t));
                }
            }
            inbox_.clear();
        }
        for (auto& t : local) {
            if (auto* done = std::get_if<OpDone>(&t)) {
                ev_.on_op_complete(done->op, done->status, std::move(done->message));
            } else if (auto* m = std::get_if<Message>(&t)) {
                ev_.on_message(m->bytes);
            } else if (auto* e = std::get_if<ConnError>(&t)) {
                ev_.on_conn_error(e->conn, "loopback: peer destroyed");
            }
        }
        return local.size();
    }
    int event_fd() const override { return efd_; }
    bool arm() override {
        std::lock_guard lk(g_mu);
        return inbox_.empty();
    }

private:
    void push_locked(Task t) {
        inbox_.push_back(std::move(t));
        std::uint64_t one = 1;
        [[maybe_unused]] auto n = ::write(efd_, &one, sizeof one);
    }
    // True if [addr, addr + bytes) lies inside one of our live regions (g_mu held).
    bool live_locked(std::uint64_t addr, std::uint64_t bytes) const {
        for (const Range& r : live_) {
            const auto base = reinterpret_cast<std::uint64_t>(r.base);
            if (addr >= base && bytes <= r.size && addr - base <= r.size - bytes) {
                return true;
            }
        }
        return false;
    }
    // Runs at the target: `remote_addr` is ours, `local_addr` the initiator's.
    void execute_locked(const DataOp& d) {
        auto init = g_agents.find(d.initiator);
        if (init == g_agents.end()) {
            return;  // initiator gone: nothing to report to
        }
        // A region released after the initiator planned the operation: touch nothing.
        for (const auto& s : d.segments) {
            if (!live_locked(s.remote_addr, s.bytes)) {
                init->second->push_locked(
                    OpDone{d.op, Status::Failed, "loopback: destination not in a live region"});
                return;
            }
        }
        for (const auto& s : d.segments) {
            auto* ours = reinterpret_cast<void*>(s.remote_addr);
            auto* theirs = reinterpret_cast<void*>(s.local_addr);
            if (d.dir == Direction::Write) {
                std::memmove(ours, theirs, s.bytes);
            } else {
                std::memmove(theirs, ours, s.bytes);
            }
        }
        init->second->push_locked(OpDone{d.op, Status::Ok, {}});
    }

    struct Range {
        std::byte* base = nullptr;
        std::size_t size = 0;
    };
    std::uint64_t instance_;
    BackendEvents& ev_;
    std::vector<Range> live_;  // allocated or registered regions, guarded by g_mu
    int efd_ = -1;
    std::deque<Task> inbox_;                         // guarded by g_mu
    std::unordered_map<std::uint64_t, Conn> conns_;  // guarded by g_mu
    std::uint64_t next_conn_ = 0;
};

}  // namespace

std::unique_ptr<Backend> make_loopback_backend(const BackendOptions& o, BackendEvents& ev) {
    return std::make_unique<LoopbackBackend>(o, ev);
}

}  // namespace pdx::detail
