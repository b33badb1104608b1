// pdx_transfer_bench: two-process bandwidth / latency / post-overhead benchmark of the pdx
// transfer core, nixlbench style. The initiator forks the target; both create an agent, allocate
// one region with one dense layout per block size (plus a 4 KiB layout), and exchange descriptors
// over a socketpair. The initiator then sweeps op x pattern x block size x blocks per transfer.
//   pdx_transfer_bench --tls tcp|shm|loopback [--sizes 4K,64K,1M] [--blocks 1,1024]
//       [--patterns contig,scatter] [--ops write,read] [--region-mib 64] [--depth 4]
//       [--time-ms 200] [--min-iters 3] [--max-iters 2000] [--post-iters 200] [--no-post]
//       [--no-verify] [--register] [--progress thread|eventfd|poll] [--eventfd]
//       [--target-progress thread|poll] [--error-mode auto|peer|none] [--no-latency-stats]
//       [--write-protocol auto|rma|am]
//       [--inline-kib N] [--post-tail N] [--tail-ids 256]
//       [--progress-spin-us N] [--csv]
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <sstream>

#include "bench/transfer/sweep.hpp"

namespace pdx::bench {
namespace {

std::uint64_t parse_size(const std::string& s) {
    char* end = nullptr;
    double v = std::strtod(s.c_str(), &end);
    std::string unit = end ? end : "";
    if (unit == "K" || unit == "KiB" || unit == "k") {
        v *= 1024;
    }
    if (unit == "M" || unit == "MiB" || unit == "m") {
        v *= 1024.0 * 1024;
    }
    if (unit == "G" || unit == "GiB" || unit == "g") {
        v *= 1024.0 * 1024 * 1024;
    }
    return static_cast<std::uint64_t>(v);
}

std::vector<std::string> split(const std::string& s) {
    std::vector<std::string> out;
    std::stringstream ss(s);
    for (std::string item; std::getline(ss, item, ',');) {
        if (!item.empty()) {
            out.push_back(item);
        }
    }
    return out;
}

[[noreturn]] void usage(const char* why) {
    std::fprintf(stderr,
                 "pdx_transfer_bench: %s (see the comment at the top of the source or "
                 "docs/transfer.md)\n",
                 why);
    std::exit(2);
}

Options parse(int argc, char** argv) {
    Options o;
    for (int i = 1; i < argc; ++i) {
        std::string a = argv[i];
        auto val = [&]() -> std::string {
            if (i + 1 >= argc) {
                usage(("missing value for " + a).c_str());
            }
            return argv[++i];
        };
        if (a == "--tls") {
            o.tls = val();
        } else if (a == "--sizes") {
            o.sizes.clear();
            for (auto& s : split(val())) {
                o.sizes.push_back(parse_size(s));
            }
        } else if (a == "--blocks") {
            o.blocks.clear();
            for (auto& s : split(val())) {
                o.blocks.push_back(std::stoul(s));
            }
        } else if (a == "--patterns") {
            o.patterns = split(val());
        } else if (a == "--ops") {
            o.ops = split(val());
        } else if (a == "--region-mib") {
            o.region_bytes = parse_size(val() + "M");
        } else if (a == "--depth") {
            o.depth = std::stoul(val());
        } else if (a == "--time-ms") {
            o.time_ms = std::stoul(val());
        } else if (a == "--min-iters") {
            o.min_iters = std::stoul(val());
        } else if (a == "--max-iters") {
            o.max_iters = std::stoul(val());
        } else if (a == "--post-iters") {
            o.post_iters = std::stoul(val());
        } else if (a == "--no-post") {
            o.do_post = false;
        } else if (a == "--no-verify") {
            o.do_verify = false;
        } else if (a == "--register") {
            o.register_memory = true;
        } else if (a == "--eventfd") {
            o.progress = "eventfd";
        } else if (a == "--progress") {
            o.progress = val();
        } else if (a == "--no-latency-stats") {
            o.latency_stats = false;
        } else if (a == "--error-mode") {
            o.error_mode = val();
        } else if (a == "--write-protocol") {
            o.write_protocol = val();
        } else if (a == "--target-progress") {
            o.target_progress = val();
        } else if (a == "--inline-kib") {
            o.inline_kib = std::stol(val());
        } else if (a == "--post-tail") {
            o.post_tail = std::stoul(val());
        } else if (a == "--tail-ids") {
            o.tail_ids = std::stoul(val());
        } else if (a == "--progress-spin-us") {
            o.progress_spin_us = std::stoul(val());
        } else if (a == "--csv") {
            o.csv = true;
        } else {
            usage(("unknown option " + a).c_str());
        }
    }
    if (o.tls != "tcp" && o.tls != "shm" && o.tls != "loopback") {
        usage("--tls tcp|shm|loopback");
    }
    if (o.progress != "thread" && o.progress != "eventfd" && o.progress != "poll") {
        usage("--progress thread|eventfd|poll");
    }
    if (o.error_mode != "auto" && o.error_mode != "peer" && o.error_mode != "none") {
        usage("--error-mode auto|peer|none");
    }
    if (o.write_protocol != "auto" && o.write_protocol != "rma" && o.write_protocol != "am") {
        usage("--write-protocol auto|rma|am");
    }
    if (o.target_progress != "thread" && o.target_progress != "poll") {
        usage("--target-progress thread|poll");
    }
    if (o.tls == "loopback" && o.target_progress != "thread") {
        usage("--target-progress poll needs a target process (tcp or shm)");
    }
    if (o.sizes.empty() || o.blocks.empty()) {
        usage("empty --sizes or --blocks");
    }
    for (auto s : o.sizes) {
        if (s < 4096 || s > o.region_bytes) {
            usage("block size outside 4 KiB..region");
        }
    }
    if (o.post_tail > 0 && (o.tail_ids == 0 || o.sizes[0] * o.tail_ids > o.region_bytes)) {
        usage("--tail-ids x the first --sizes must fit the region");
    }
    if (o.region_bytes < (96u << 10)) {
        usage("--region-mib too small");
    }
    return o;
}

struct Side {
    std::unique_ptr<Agent> agent;
    std::vector<LayoutId> layouts;  // one per size, then the 4 KiB layout
    std::unique_ptr<std::byte[]> owned;
};

bool make_side(const Options& o, const char* name, bool initiator, Side& s) {
    Config cfg;
    cfg.name = name;
    if (o.tls == "loopback") {
        cfg.backend = BackendKind::Loopback;
    } else if (o.tls == "tcp") {
        cfg.transports = "tcp";
        cfg.net_devices = "lo";
    } else {
        cfg.transports = "posix,self";
    }
    if (initiator ? o.progress != "thread" : o.target_progress == "poll") {
        cfg.progress = ProgressMode::EventFd;
    }
    if (initiator) {
        cfg.latency_stats = o.latency_stats;
    }
    if (o.error_mode != "auto") {
        cfg.error_mode = o.error_mode == "peer" ? ErrorMode::Peer : ErrorMode::None;
    }
    if (o.write_protocol != "auto") {
        cfg.write_protocol = o.write_protocol == "rma" ? WriteProtocol::Rma : WriteProtocol::Am;
    }
    if (o.inline_kib >= 0) {
        cfg.inline_post_bytes = cfg.inline_post_bytes_peer_mode =
            static_cast<std::uint64_t>(o.inline_kib) << 10;
    }
    cfg.progress_spin = std::chrono::microseconds(o.progress_spin_us);
    cfg.max_transfer_bytes = o.region_bytes;
    auto a = Agent::create(cfg);
    if (!a) {
        std::fprintf(stderr, "%s: agent: %s\n", name, a.message().c_str());
        return false;
    }
    s.agent = std::move(*a);
    Result<RegionId> region{Status::Failed, "unset"};
    if (o.register_memory) {
        s.owned.reset(new std::byte[o.region_bytes]);
        std::memset(s.owned.get(), 0, o.region_bytes);
        region = s.agent->register_region(s.owned.get(), o.region_bytes);
    } else {
        region = s.agent->allocate_region(o.region_bytes);
    }
    if (!region) {
        std::fprintf(stderr, "%s: region: %s\n", name, region.message().c_str());
        return false;
    }
    auto sizes = o.sizes;
    sizes.push_back(4096);
    for (auto size : sizes) {
        Layout l{*region, 0, size, 0, static_cast<std::uint32_t>(o.region_bytes / size)};
        auto id = s.agent->add_layout(l);
        if (!id) {
            std::fprintf(stderr, "%s: layout: %s\n", name, id.message().c_str());
            return false;
        }
        s.layouts.push_back(*id);
    }
    return true;
}

bool send_blob(int fd, const std::vector<std::byte>& b) {
    std::uint32_t n = static_cast<std::uint32_t>(b.size());
    return ::write(fd, &n, 4) == 4 && ::write(fd, b.data(), n) == static_cast<ssize_t>(n);
}

bool recv_blob(int fd, std::vector<std::byte>& b) {
    std::uint32_t n = 0;
    if (::read(fd, &n, 4) != 4 || n > (16u << 20)) {
        return false;
    }
    b.resize(n);
    for (std::size_t got = 0; got < n;) {
        ssize_t r = ::read(fd, b.data() + got, n - got);
        if (r <= 0) {
            return false;
        }
        got += static_cast<std::size_t>(r);
    }
    return true;
}

// Sends our descriptor, adds the other side's; returns its handle (0 on failure).
PeerHandle exchange(Side& s, int fd) {
    std::vector<std::byte> theirs;
    if (!send_blob(fd, s.agent->descriptor()) || !recv_blob(fd, theirs)) {
        return kNoPeer;
    }
    auto p = s.agent->add_peer(theirs);
    if (!p) {
        std::fprintf(stderr, "add_peer: %s\n", p.message().c_str());
    }
    return p ? *p : kNoPeer;
}

int run_target(const Options& o, int fd) {
    ::alarm(900);  // never outlive a stuck initiator by much
    Side s;
    if (!make_side(o, "bench-target", false, s)) {
        return 1;
    }
    if (exchange(s, fd) == kNoPeer) {
        return 1;
    }
    char c = 0;
    if (o.target_progress == "poll") {
        // Busy-poll progress() until the initiator closes the socketpair (EOF); the fd is
        // checked every 256 rounds. Bounded by that EOF and by the alarm above.
        for (std::uint32_t round = 1;; ++round) {
            s.agent->progress();
            if (round % 256 == 0) {
                pollfd p{fd, POLLIN, 0};
                if (::poll(&p, 1, 0) != 0) {
                    return 0;
                }
            }
        }
    }
    while (::read(fd, &c, 1) < 0) {
    }
    return 0;
}

// --post-tail: the distribution of single write_blocks call times, and the slowest calls.
bool print_post_tail(const Options& o, PostTail t) {
    if (!t.error.empty()) {
        std::fprintf(stderr, "post tail: %s\n", t.error.c_str());
        return false;
    }
    if (t.us.empty()) {
        return true;
    }
    std::vector<double> sorted = t.us;
    std::sort(sorted.begin(), sorted.end());
    auto at = [&](double q) { return sorted[std::size_t(q * double(sorted.size() - 1))]; };
    const auto over_ms =
        std::count_if(sorted.begin(), sorted.end(), [](double us) { return us >= 1000; });
    std::printf(
        "# post_tail (%u calls of %u ids x %llu B, depth %u, progress %s): p50 %.1f us, "
        "p90 %.1f us, p99 %.1f us, max %.1f us, calls >= 1 ms: %lld\n",
        unsigned(t.us.size()), o.tail_ids, (unsigned long long)o.sizes[0], o.depth,
        o.progress.c_str(), at(0.5), at(0.9), at(0.99), sorted.back(), (long long)over_ms);
    return true;
}

int run_initiator(const Options& o, Side& s, PeerHandle peer) {
    if (peer == kNoPeer) {
        return 1;
    }
    Sweep sweep(*s.agent, peer, o, s.layouts);
    if (o.do_verify) {
        std::string err;
        if (!sweep.verify(err)) {
            std::fprintf(stderr, "verify: %s\n", err.c_str());
            return 1;
        }
        if (!o.csv) {
            std::printf("# verify: write + read back of 8 blocks OK\n");
        }
    }
    if (auto info = s.agent->peer_info(peer)) {
        std::printf("# peer %s: same_host=%d peer_error_mode=%d (UCP_ERR_HANDLING_MODE_%s)\n",
                    info->name.c_str(), int(info->same_host), int(info->peer_error_mode),
                    info->peer_error_mode ? "PEER" : "NONE");
    }
    int failures = 0;
    if (o.post_tail > 0) {
        failures += print_post_tail(o, sweep.post_tail()) ? 0 : 1;
    }
    print_header(o);
    for (const auto& op : o.ops) {
        for (const auto& pattern : o.patterns) {
            for (std::size_t si = 0; si < o.sizes.size(); ++si) {
                for (auto n : o.blocks) {
                    if (n == 0 || o.sizes[si] * n > o.region_bytes) {
                        continue;
                    }
                    Cell c = sweep.run_cell(op, pattern, si, n);
                    failures += !c.error.empty();
                    print_cell(o, c);
                }
            }
        }
    }
    if (o.do_post) {
        for (const char* pattern : {"scatter", "contig"}) {
            std::string err;
            double ns = sweep.post_ns_per_id(pattern, err);
            const char* key = std::string(pattern) == "scatter" ? "post_overhead_ns_per_id"
                                                                : "post_overhead_contig_ns_per_id";
            if (ns < 0) {
                std::fprintf(stderr, "post overhead (%s): %s\n", pattern, err.c_str());
                ++failures;
            } else {
                std::printf("%s%s,%.1f\n", o.csv ? "" : "# ", key, ns);
            }
        }
    }
    Stats st = s.agent->stats();
    std::printf(
        "%sstats (progress: initiator %s, target %s): posted %llu ok %llu failed %llu descs/xfer "
        "%.2f post "
        "mean %.2f us\n",
        "# ", o.progress.c_str(), o.target_progress.c_str(),
        (unsigned long long)st.transfers_posted, (unsigned long long)st.transfers_ok,
        (unsigned long long)(st.transfers_failed + st.transfers_expired + st.transfers_peer_gone),
        st.descriptors_per_transfer(), st.post.mean_us());
    return failures ? 1 : 0;
}

}  // namespace
}  // namespace pdx::bench

int main(int argc, char** argv) {
    using namespace pdx::bench;
    Options o = parse(argc, argv);
    if (o.tls == "loopback") {  // both agents in this process
        Side a, b;
        if (!make_side(o, "bench-initiator", true, a) || !make_side(o, "bench-target", false, b)) {
            return 1;
        }
        auto pb = a.agent->add_peer(b.agent->descriptor());
        auto pa = b.agent->add_peer(a.agent->descriptor());
        if (!pa || !pb) {
            return 1;
        }
        return run_initiator(o, a, *pb);
    }
    if (!pdx::ucx_available()) {
        std::fprintf(stderr, "UCX backend not built in\n");
        return 1;
    }
    int sv[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) {
        return 1;
    }
    std::fflush(stdout);
    pid_t child = ::fork();
    if (child < 0) {
        return 1;
    }
    if (child == 0) {
        ::close(sv[0]);
        _exit(run_target(o, sv[1]));
    }
    ::close(sv[1]);
    int rc = 1;
    {
        Side s;
        if (make_side(o, "bench-initiator", true, s)) {
            rc = run_initiator(o, s, exchange(s, sv[0]));
        }
    }
    ::close(sv[0]);  // EOF tells the target to exit
    int status = 0;
    ::waitpid(child, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        std::fprintf(stderr, "target exited with status %d\n", status);
        rc = 1;
    }
    return rc;
}
