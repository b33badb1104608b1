// kv_ready_bench: CPU per LMCache "KV ready" notification in the router process, for the two
// ways of joining a ZMQ socket to the router's Asio loop:
//   fd      KvReadyListener as shipped: the socket's ZMQ_FD in a posix::stream_descriptor,
//           drained on the loop's thread (no thread of ours)
//   thread  a receiver thread of ours that blocks in recv, drains what else is queued (up to
//           KvReadyListener::kBatch) and posts the batch to the loop, which decodes and counts
//           it with the same decode_kv_ready + KvReadyTable
// A child process (this program, `send` mode) PUSHes the notifications: as fast as it can
// (`flood`) or one every `interval_us` (`paced`), so the router side wakes per message. The
// parent registers every id first (not measured), then measures its own user+system CPU
// (getrusage: the loop, our thread, libzmq's I/O thread) from the child's start until the last
// id is ready. Results are in docs/benchmarks.md ("LMCache KV-ready receiver").
//
//   kv_ready_bench [fd|thread|both] [count] [interval_us] [rounds]
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>
#include <zmq.hpp>

#include "router/kv/kv_ready_frame.hpp"
#include "router/kv/kv_ready_listener.hpp"

extern char** environ;

namespace {

using namespace pdr;
using kv::KvReadyListener;

std::string id_of(std::size_t i) {
    return "cmpl-" + std::to_string(i) + "-0123456789abcdef0123456789abcdef";
}

int send_mode(const std::string& endpoint, std::size_t count, long interval_us) {
    zmq::context_t ctx(1);
    zmq::socket_t s(ctx, zmq::socket_type::push);
    s.set(zmq::sockopt::linger, 10'000);
    s.connect(endpoint);
    for (std::size_t i = 0; i < count; ++i) {
        const auto bytes = nlohmann::json::to_msgpack(
            nlohmann::json{{"type", "ProxyNotif"}, {"req_id", id_of(i)}});
        s.send(zmq::buffer(bytes), zmq::send_flags::none);
        if (interval_us > 0) {
            std::this_thread::sleep_for(std::chrono::microseconds(interval_us));
        }
    }
    return 0;
}

double cpu_seconds(int who = RUSAGE_SELF) {
    rusage u{};
    ::getrusage(who, &u);
    auto sec = [](const timeval& t) { return static_cast<double>(t.tv_sec) + t.tv_usec / 1e6; };
    return sec(u.ru_utime) + sec(u.ru_stime);
}

pid_t spawn_sender(const char* self, const std::string& endpoint, std::size_t count,
                   long interval_us) {
    std::vector<std::string> args{self, "send", endpoint, std::to_string(count),
                                  std::to_string(interval_us)};
    std::vector<char*> argv;
    for (auto& a : args) {
        argv.push_back(a.data());
    }
    argv.push_back(nullptr);
    pid_t pid = 0;
    if (::posix_spawn(&pid, self, nullptr, nullptr, argv.data(), environ) != 0) {
        std::perror("posix_spawn");
        std::exit(1);
    }
    return pid;
}

struct Result {
    double cpu_us_per_msg, loop_us_per_msg, wall_s;
};

// The receiver thread variant: what KvReadyListener would be with a thread instead of ZMQ_FD.
class ThreadReceiver {
public:
    ThreadReceiver(net::io_context& ioc, kv::KvReadyTable& table, metrics::RouterMetrics& m)
        : ioc_(ioc), table_(table), metrics_(m), sock_(ctx_, zmq::socket_type::pull) {
        sock_.set(zmq::sockopt::linger, 0);
        sock_.set(zmq::sockopt::maxmsgsize, std::int64_t{4 * 4096});
        sock_.bind("tcp://127.0.0.1:0");
        endpoint_ = sock_.get(zmq::sockopt::last_endpoint);
        thread_ = std::thread([this] { run(); });
    }
    ~ThreadReceiver() {
        ctx_.shutdown();  // recv throws ETERM in the thread
        thread_.join();
    }
    const std::string& endpoint() const { return endpoint_; }

private:
    void run() {
        try {
            zmq::message_t msg;
            for (;;) {
                std::vector<std::string> batch;
                (void)sock_.recv(msg, zmq::recv_flags::none);
                batch.emplace_back(msg.to_string_view());
                while (batch.size() < KvReadyListener::kBatch &&
                       sock_.recv(msg, zmq::recv_flags::dontwait)) {
                    batch.emplace_back(msg.to_string_view());
                }
                net::post(ioc_, [this, b = std::move(batch)] {
                    const auto now = Clock::now();
                    for (const std::string& bytes : b) {
                        auto f = kv::decode_kv_ready(bytes, 4096);
                        if (!f.ok()) {
                            metrics_.kv_ready_malformed(*f.malformed);
                            continue;
                        }
                        (void)table_.arrive(f.req_id, now);
                        metrics_.kv_ready_notification(metrics::KvReadyOutcome::Early);
                    }
                    metrics_.kv_ready_pending.Set(static_cast<double>(table_.size()));
                });
            }
        } catch (const zmq::error_t&) {
        }
    }

    net::io_context& ioc_;
    kv::KvReadyTable& table_;
    metrics::RouterMetrics& metrics_;
    zmq::context_t ctx_{1};
    zmq::socket_t sock_;
    std::string endpoint_;
    std::thread thread_;
};

Result measure(const char* self, const std::string& mode, std::size_t count, long interval_us) {
    net::io_context ioc;
    metrics::Registry reg;
    metrics::RouterMetrics m(reg);
    kv::KvReadyOptions opts;
    opts.bind = "tcp://127.0.0.1:0";
    opts.max_pending = count + 16;
    opts.ttl = Duration{600'000};
    KvReadyListener listener(ioc.get_executor(), opts, m);
    kv::KvReadyTable table({opts.ttl, opts.max_pending});
    std::unique_ptr<ThreadReceiver> thread;
    std::string endpoint;
    std::vector<KvReadyListener::Registration> regs;
    if (mode == "fd") {
        std::string error;
        if (!listener.start(error)) {
            std::fprintf(stderr, "%s\n", error.c_str());
            std::exit(1);
        }
        endpoint = listener.endpoint();
        regs.reserve(count);
        for (std::size_t i = 0; i < count; ++i) {
            regs.push_back(listener.expect(id_of(i), 1));
        }
    } else {
        thread = std::make_unique<ThreadReceiver>(ioc, table, m);
        endpoint = thread->endpoint();
        for (std::size_t i = 0; i < count; ++i) {
            (void)table.expect(id_of(i), 1, Clock::now());
        }
    }
    const std::string last = id_of(count - 1);
    auto done = [&] { return mode == "fd" ? regs.back().ready() : table.ready(last); };
    auto guard = net::make_work_guard(ioc);
    const double cpu0 = cpu_seconds();
    const double loop0 = cpu_seconds(RUSAGE_THREAD);
    const auto t0 = Clock::now();
    const pid_t child = spawn_sender(self, endpoint, count, interval_us);
    while (!done()) {
        ioc.run_one();
    }
    const double cpu = cpu_seconds() - cpu0;
    const double loop = cpu_seconds(RUSAGE_THREAD) - loop0;
    const double wall = std::chrono::duration<double>(Clock::now() - t0).count();
    int status = 0;
    ::waitpid(child, &status, 0);
    regs.clear();
    listener.stop();
    guard.reset();
    ioc.restart();
    ioc.run_for(std::chrono::milliseconds(20));
    const double n = static_cast<double>(count);
    return Result{cpu / n * 1e6, loop / n * 1e6, wall};
}

}  // namespace

int main(int argc, char** argv) {
    const std::string mode = argc > 1 ? argv[1] : "both";
    if (mode == "send" && argc == 5) {
        return send_mode(argv[2], std::stoul(argv[3]), std::stol(argv[4]));
    }
    const std::size_t count = argc > 2 ? std::stoul(argv[2]) : 200'000;
    const long interval_us = argc > 3 ? std::stol(argv[3]) : 0;
    const int rounds = argc > 4 ? std::stoi(argv[4]) : 3;
    std::vector<std::string> modes =
        mode == "both" ? std::vector<std::string>{"fd", "thread"} : std::vector<std::string>{mode};
    std::printf(
        "%zu notifications per round, %s, %d rounds (modes interleaved)\n", count,
        interval_us > 0 ? ("one every " + std::to_string(interval_us) + " us").c_str() : "flood",
        rounds);
    std::vector<std::vector<Result>> all(modes.size());
    for (int r = 0; r < rounds; ++r) {
        for (std::size_t i = 0; i < modes.size(); ++i) {
            all[i].push_back(measure(argv[0], modes[i], count, interval_us));
        }
    }
    for (std::size_t i = 0; i < modes.size(); ++i) {
        auto& v = all[i];
        std::sort(v.begin(), v.end(), [](const Result& a, const Result& b) {
            return a.cpu_us_per_msg < b.cpu_us_per_msg;
        });
        const Result& med = v[v.size() / 2];
        std::printf(
            "%-6s  CPU per notification: best %.2f us, median %.2f us, of which the loop's "
            "thread %.2f us (median round; wall %.2f s)\n",
            modes[i].c_str(), v.front().cpu_us_per_msg, med.cpu_us_per_msg, med.loop_us_per_msg,
            med.wall_s);
    }
    return 0;
}
