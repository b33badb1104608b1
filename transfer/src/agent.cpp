// Agent: construction, memory, layouts, descriptors, peers, leases and stats.
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <unistd.h>
#include <bit>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>

#include "agent_impl.hpp"

namespace pdx {
namespace {

std::string default_host_id() {
    char host[256] = {};
    ::gethostname(host, sizeof host - 1);
    std::string boot;
    std::ifstream f("/proc/sys/kernel/random/boot_id");
    std::getline(f, boot);
    return std::string(host) + "/" + boot;
}

std::uint64_t random_nonce() {
    std::random_device rd;
    std::uint64_t v = 0;
    while (v == 0) {
        v = (std::uint64_t(rd()) << 32) ^ rd() ^ std::uint64_t(::getpid()) << 16;
    }
    return v;
}

}  // namespace

const char* to_string(Status s) noexcept {
    switch (s) {
        case Status::Ok:
            return "ok";
        case Status::InProgress:
            return "in_progress";
        case Status::PeerGone:
            return "peer_gone";
        case Status::Expired:
            return "expired";
        case Status::Canceled:
            return "canceled";
        case Status::Failed:
            return "failed";
        case Status::Invalid:
            return "invalid";
        case Status::NotFound:
            return "not_found";
        case Status::Busy:
            return "busy";
        case Status::Unsupported:
            return "unsupported";
    }
    return "unknown";
}

Result<DescriptorSummary> inspect_descriptor(std::span<const std::byte> blob) {
    auto d = detail::decode_descriptor(blob);
    if (!d) {
        return {d.status(), d.message()};
    }
    DescriptorSummary s;
    s.name = d->name;
    s.instance = d->instance;
    s.version = detail::kDescriptorVersion;
    s.compat_hash = d->compat;
    s.backend = d->backend;
    s.host_id = d->host_id;
    s.regions = static_cast<std::uint32_t>(d->regions.size());
    s.layouts = static_cast<std::uint32_t>(d->layouts.size());
    return s;
}

// ---- Impl: life cycle --------------------------------------------------------------------

Agent::Impl::Impl(const Config& config)
    : cfg_(config), instance_(random_nonce()), history_(config.completed_history) {
    host_id_ = cfg_.host_id.empty() ? default_host_id() : cfg_.host_id;
    process_ = detail::self_process();
    // Durations are compared with Clock (ns) differences: bound them well inside its range.
    constexpr auto kLongest =
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::hours(24 * 365 * 100));
    if (cfg_.heartbeat_interval.count() <= 0) {
        cfg_.heartbeat_interval = std::chrono::milliseconds(1000);
    }
    cfg_.heartbeat_interval = std::min(cfg_.heartbeat_interval, kLongest / 3);
    if (cfg_.peer_timeout <= cfg_.heartbeat_interval) {
        cfg_.peer_timeout = 3 * cfg_.heartbeat_interval;
    }
    cfg_.peer_timeout = std::min(cfg_.peer_timeout, kLongest);
    if (cfg_.default_deadline.count() <= 0) {
        cfg_.default_deadline = Config{}.default_deadline;  // documented: 30 s
    }
    if (cfg_.max_transfer_bytes == 0) {
        cfg_.max_transfer_bytes = Config{}.max_transfer_bytes;
    }
    if (cfg_.max_blocks_per_transfer == 0) {
        cfg_.max_blocks_per_transfer = Config{}.max_blocks_per_transfer;
    }
    if (cfg_.completed_history == 0) {
        cfg_.completed_history = 1;  // as history_ counts it
    }
    // No more slots than results kept: a slot never outlives its history entry unnoticed.
    const std::uint64_t slots = std::bit_floor(
        std::min<std::uint64_t>(kMaxDoneSlots, std::max<std::uint64_t>(1, history_.capacity())));
    done_slots_ = std::make_unique<std::atomic<std::uint64_t>[]>(slots);
    done_mask_ = slots - 1;
}

Result<void> Agent::Impl::start() {
    detail::BackendOptions o{instance_, cfg_.transports, cfg_.net_devices, cfg_.write_protocol};
    if (cfg_.backend == BackendKind::Loopback) {
        backend_ = detail::make_loopback_backend(o, *this);
    } else {
        std::string err;
        backend_ = detail::make_ucx_backend(o, *this, err);
        if (!backend_) {
            return {ucx_available() ? Status::Failed : Status::Unsupported, err};
        }
    }
    wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    epoll_fd_ = ::epoll_create1(EPOLL_CLOEXEC);
    if (wake_fd_ < 0 || epoll_fd_ < 0) {
        return {Status::Failed, "eventfd/epoll failed"};
    }
    auto add = [&](int fd) {
        epoll_event ev{};
        ev.events = EPOLLIN;
        ev.data.fd = fd;
        ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev);
    };
    add(wake_fd_);
    for (int fd : {backend_->event_fd(), backend_->message_event_fd()}) {
        if (fd >= 0) {
            add(fd);
        }
    }
    next_heartbeat_ = deadline_after(cfg_.heartbeat_interval);
    if (cfg_.progress == ProgressMode::EventFd) {
        sleeping_ = true;  // a caller may wait on the fd before its first arm()
        timer_fd_ = ::timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
        itimerspec its{};
        its.it_interval.tv_nsec = kTick.count() * 1000000;
        its.it_value = its.it_interval;
        ::timerfd_settime(timer_fd_, 0, &its, nullptr);
        add(timer_fd_);
    } else {
        thread_ = std::thread([this] { thread_main(); });
    }
    return {};
}

Agent::Impl::~Impl() {
    stop_ = true;
    wake();
    if (thread_.joinable()) {
        thread_.join();
    }
    std::lock_guard lk(mu_);
    for (auto& [h, p] : peers_) {
        if (p.conn) {
            backend_->disconnect(p.conn, detail::Backend::Close::Abort);
        }
    }
    for (auto& r : regions_) {
        if (r.live) {
            backend_->release(r.mem);
        }
    }
    backend_.reset();
    for (int fd : {wake_fd_, timer_fd_, epoll_fd_}) {
        if (fd >= 0) {
            ::close(fd);
        }
    }
}

// ---- Agent façade ------------------------------------------------------------------------

Result<std::unique_ptr<Agent>> Agent::create(const Config& config) {
    auto impl = std::make_unique<Impl>(config);
    auto r = impl->start();
    if (!r) {
        return {r.status(), r.message()};
    }
    return std::unique_ptr<Agent>(new Agent(std::move(impl)));
}

Agent::Agent(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Agent::~Agent() = default;
const std::string& Agent::name() const {
    return impl_->cfg_.name;
}
std::uint64_t Agent::instance() const {
    return impl_->instance_;
}
const Config& Agent::config() const {
    return impl_->cfg_;
}

// ---- memory ------------------------------------------------------------------------------

Result<RegionId> Agent::Impl::add_region(Result<detail::LocalRegion> r) {
    if (!r) {
        return {r.status(), r.message()};
    }
    regions_.push_back(Region{std::move(*r), true, 0});
    return static_cast<RegionId>(regions_.size() - 1);
}

namespace {
Result<void> host_only(MemoryKind kind) {
    if (kind != MemoryKind::Host) {
        return {Status::Unsupported,
                "memory kind " + std::to_string(static_cast<int>(kind)) +
                    " (GPU) is not supported: this build moves host memory only"};
    }
    return {};
}
}  // namespace

Result<RegionId> Agent::allocate_region(std::size_t bytes, MemoryKind kind) {
    if (auto k = host_only(kind); !k) {
        return {k.status(), k.message()};
    }
    if (bytes == 0) {
        return {Status::Invalid, "allocate_region: zero bytes"};
    }
    // A new region is zero-filled, which commits every page: a size beyond the machine's memory
    // would end in the OOM killer rather than in an error (UCX may map such a size lazily, and
    // over posix shm the file it fills outlives a killed process).
    const long pages = ::sysconf(_SC_PHYS_PAGES);
    const long page = ::sysconf(_SC_PAGESIZE);
    if (pages > 0 && page > 0 && bytes / std::size_t(page) >= std::size_t(pages)) {
        return {Status::Invalid, "allocate_region: " + std::to_string(bytes) +
                                     " bytes is more than this machine's memory"};
    }
    std::lock_guard lk(impl_->mu_);
    return impl_->add_region(impl_->backend_->allocate(bytes));
}

Result<RegionId> Agent::register_region(void* data, std::size_t bytes, MemoryKind kind) {
    if (auto k = host_only(kind); !k) {
        return {k.status(), k.message()};
    }
    if (!data || bytes == 0) {
        return {Status::Invalid, "register_region: null or empty memory"};
    }
    std::lock_guard lk(impl_->mu_);
    auto r = impl_->add_region(impl_->backend_->register_memory(data, bytes));
    if (r && !impl_->region_shm_rma(*r)) {
        ++impl_->stats_.regions_without_shm;
        if (!impl_->warned_register_) {  // once per agent
            impl_->warned_register_ = true;
            std::fprintf(stderr,
                         "pdx: warning: agent '%s': register_region() memory cannot be reached "
                         "by shared-memory RMA (UCX only maps memory it allocated); same-host "
                         "peers use a slower transport. Use allocate_region() for KV pools.\n",
                         impl_->cfg_.name.c_str());
        }
    }
    return r;
}

Result<void> Agent::release_region(RegionId region) {
    std::lock_guard lk(impl_->mu_);
    if (region >= impl_->regions_.size() || !impl_->regions_[region].live) {
        return {Status::NotFound, "unknown region " + std::to_string(region)};
    }
    auto& r = impl_->regions_[region];
    if (impl_->leases_.region_leases(region) > 0) {
        return {Status::Busy, "region " + std::to_string(region) + " has leased blocks"};
    }
    if (r.ops > 0) {
        return {Status::Busy,
                "region " + std::to_string(region) + " has transfers in flight (" +
                    std::to_string(r.ops) + ", of which " +
                    std::to_string(impl_->settling_on(region)) +
                    " already ended but their posted operations still run: a canceled or "
                    "expired transfer keeps its memory until they complete)"};
    }
    impl_->backend_->release(r.mem);
    r.live = false;
    return {};
}

std::uint32_t Agent::Impl::settling_on(RegionId region) const {
    std::uint32_t n = 0;
    for (const auto& [h, x] : xfers_) {
        if (!is_terminal(x.res.status) || !x.backend_pending) {
            continue;
        }
        const bool pins = x.pinned.empty() ? x.region == region
                                           : std::find(x.pinned.begin(), x.pinned.end(), region) !=
                                                 x.pinned.end();
        n += pins ? 1 : 0;
    }
    return n;
}

bool Agent::Impl::region_shm_rma(RegionId region) const {
    return cfg_.backend != BackendKind::Ucx || regions_[region].mem.owned || !shm_possible();
}

Result<RegionInfo> Agent::region_info(RegionId region) const {
    std::lock_guard lk(impl_->mu_);
    if (region >= impl_->regions_.size() || !impl_->regions_[region].live) {
        return {Status::NotFound, "unknown region " + std::to_string(region)};
    }
    const auto& r = impl_->regions_[region];
    RegionInfo i;
    i.region = region;
    i.bytes = r.mem.size;
    i.allocated = r.mem.owned;
    i.shm_rma = impl_->region_shm_rma(region);
    i.transfers_in_flight = r.ops;
    i.transfers_settling = impl_->settling_on(region);
    i.leases = impl_->leases_.region_leases(region);
    return i;
}

std::span<std::byte> Agent::region_memory(RegionId region) const {
    std::lock_guard lk(impl_->mu_);
    if (region >= impl_->regions_.size() || !impl_->regions_[region].live) {
        return {};
    }
    auto& m = impl_->regions_[region].mem;
    return {m.base, m.size};
}

Result<LayoutId> Agent::add_layout(const Layout& layout) {
    std::lock_guard lk(impl_->mu_);
    if (layout.region >= impl_->regions_.size() || !impl_->regions_[layout.region].live) {
        return {Status::NotFound, "add_layout: unknown region " + std::to_string(layout.region)};
    }
    Layout l = layout;
    if (l.stride == 0) {
        l.stride = l.block_bytes;
    }
    if (!detail::layout_fits(l, impl_->regions_[l.region].mem.size)) {
        return {Status::Invalid,
                "add_layout: layout does not fit its region (or has zero blocks, "
                "zero block bytes, or stride < block bytes)"};
    }
    impl_->layouts_.push_back(l);
    return static_cast<LayoutId>(impl_->layouts_.size() - 1);
}

std::span<std::byte> Agent::block(LayoutId layout, BlockId id) const {
    std::lock_guard lk(impl_->mu_);
    if (layout >= impl_->layouts_.size()) {
        return {};
    }
    const Layout& l = impl_->layouts_[layout];
    if (id >= l.count || !impl_->regions_[l.region].live) {
        return {};
    }
    return {impl_->regions_[l.region].mem.base + l.offset + std::uint64_t(id) * l.stride,
            l.block_bytes};
}

// ---- leases ------------------------------------------------------------------------------

Result<void> Agent::lease(std::uint64_t transfer_id, LayoutId layout, std::span<const BlockId> ids,
                          std::chrono::milliseconds ttl) {
    std::lock_guard lk(impl_->mu_);
    if (layout >= impl_->layouts_.size()) {
        return {Status::NotFound, "lease: unknown layout"};
    }
    if (ids.empty()) {
        return {Status::Invalid, "lease: no block ids"};
    }
    if (ttl.count() <= 0) {
        return {Status::Invalid, "lease: ttl must be positive"};
    }
    const Layout& l = impl_->layouts_[layout];
    if (!impl_->regions_[l.region].live) {
        return {Status::Invalid, "lease: the layout's region was released"};
    }
    for (BlockId id : ids) {
        if (id >= l.count) {
            return {Status::Invalid, "lease: block " + std::to_string(id) + " out of range"};
        }
    }
    if (auto* existing = impl_->leases_.find(transfer_id); existing && existing->layout != layout) {
        return {Status::Invalid, "lease: transfer id already leases another layout"};
    }
    impl_->leases_.lease(transfer_id, layout, l.region, ids, deadline_after(ttl));
    impl_->stats_.leases_active = impl_->leases_.size();
    return {};
}

Result<void> Agent::renew(std::uint64_t transfer_id, std::chrono::milliseconds ttl) {
    if (ttl.count() <= 0) {
        return {Status::Invalid, "renew: ttl must be positive"};
    }
    std::lock_guard lk(impl_->mu_);
    if (!impl_->leases_.renew(transfer_id, deadline_after(ttl))) {
        return {Status::NotFound, "renew: no lease for transfer " + std::to_string(transfer_id)};
    }
    return {};
}

std::size_t Agent::renew(std::span<const std::uint64_t> ids, std::chrono::milliseconds ttl) {
    if (ttl.count() <= 0) {
        return 0;  // like renew(id, ttl): a ttl <= 0 renews nothing
    }
    std::lock_guard lk(impl_->mu_);
    // Each lease counts once, however often its id is listed.
    std::vector<std::uint64_t> distinct(ids.begin(), ids.end());
    std::sort(distinct.begin(), distinct.end());
    distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
    std::size_t n = 0;
    const auto until = deadline_after(ttl);
    for (auto id : distinct) {
        n += impl_->leases_.renew(id, until) ? 1 : 0;
    }
    return n;
}

Result<void> Agent::release(std::uint64_t transfer_id) {
    std::lock_guard lk(impl_->mu_);
    if (!impl_->leases_.release(transfer_id)) {
        return {Status::NotFound, "release: no lease for transfer " + std::to_string(transfer_id)};
    }
    impl_->stats_.leases_active = impl_->leases_.size();
    return {};
}

bool Agent::is_leased(LayoutId layout, BlockId id) const {
    std::lock_guard lk(impl_->mu_);
    return impl_->leases_.is_leased(layout, id);
}

std::vector<std::uint64_t> Agent::expire_leases() {
    std::lock_guard lk(impl_->mu_);
    auto now_expired = impl_->leases_.expire(Clock::now());
    impl_->stats_.leases_expired += now_expired.size();
    impl_->stats_.leases_active = impl_->leases_.size();
    auto out = std::move(impl_->expired_leases_);
    impl_->expired_leases_.clear();
    out.insert(out.end(), now_expired.begin(), now_expired.end());
    return out;
}

Stats Agent::stats() const {
    std::lock_guard lk(impl_->mu_);
    Stats s = impl_->stats_;
    s.leases_active = impl_->leases_.size();
    for (const auto& [h, x] : impl_->xfers_) {
        s.transfers_settling += is_terminal(x.res.status) && x.backend_pending ? 1 : 0;
    }
    const double ns_per_tick = impl_->latency_clock_.ns_per_tick();
    s.post = impl_->post_ticks_.to_ns(ns_per_tick);
    s.completion = impl_->completion_ticks_.to_ns(ns_per_tick);
    return s;
}

}  // namespace pdx
