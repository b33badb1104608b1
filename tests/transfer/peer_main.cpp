// pdx_test_peer: the far side of the multi-process transfer tests. It runs one agent in EventFd
// mode on a single thread and obeys line commands from the test over an inherited socket:
//   PEER <hex>                      add_peer            -> OK <handle> | ERR <status> <msg>
//   FILL <seed>                     fill every block    -> OK
//   VERIFY <seed> <dst>:<src> ...   byte-compare blocks -> OK | BAD <dst> <offset>
//   FREEZE <ms>                     stop progressing    -> OK (sent before freezing)
//   WAITNOTE <kind> <xfer> <ms>     wait for a notification -> OK <payload> | TIMEOUT
//   ALIVE <handle>                  peer_info           -> OK <alive 0|1> | ERR <status>
//   WRITE <handle> <xfer> <ms> <src>:<dst> ...  write_blocks with a Done note, waited for
//                                   at most <ms>        -> OK <status> | ERR <status> <msg>
//   QUIT
#include <poll.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <thread>

#include "pdx/agent.hpp"
#include "tests/transfer/peer_proto.hpp"

namespace {

using namespace std::chrono_literals;
using pdx::test::LineChannel;

std::string arg(int argc, char** argv, const std::string& key, const std::string& def) {
    std::string prefix = "--" + key + "=";
    for (int i = 1; i < argc; ++i) {
        if (std::strncmp(argv[i], prefix.c_str(), prefix.size()) == 0) {
            return argv[i] + prefix.size();
        }
    }
    return def;
}

}  // namespace

int main(int argc, char** argv) {
    int fd = std::atoi(arg(argc, argv, "fd", "-1").c_str());
    if (fd < 0) {
        std::fprintf(stderr, "usage: pdx_test_peer --fd=N [--name= --tls= --dev= ...]\n");
        return 2;
    }
    LineChannel ch(fd);
    pdx::Config c;
    c.name = arg(argc, argv, "name", "peer");
    c.transports = arg(argc, argv, "tls", "tcp");
    c.net_devices = arg(argc, argv, "dev", "");
    c.progress = pdx::ProgressMode::EventFd;
    c.error_mode = static_cast<pdx::ErrorMode>(std::atoi(arg(argc, argv, "errmode", "0").c_str()));
    c.heartbeat_interval =
        std::chrono::milliseconds(std::atoi(arg(argc, argv, "hb", "200").c_str()));
    c.peer_timeout = std::chrono::milliseconds(std::atoi(arg(argc, argv, "dead", "1000").c_str()));
    std::uint32_t blocks = std::atoi(arg(argc, argv, "blocks", "16").c_str());
    std::uint64_t block_bytes =
        std::strtoull(arg(argc, argv, "bytes", "65536").c_str(), nullptr, 10);

    auto agent = pdx::Agent::create(c);
    if (!agent) {
        ch.send("ERR create " + agent.message());
        return 1;
    }
    auto& a = **agent;
    auto region = a.allocate_region(blocks * block_bytes);
    auto layout = region ? a.add_layout({*region, 0, block_bytes, 0, blocks})
                         : pdx::Result<pdx::LayoutId>(region.status(), region.message());
    if (!layout) {
        ch.send("ERR layout " + layout.message());
        return 1;
    }
    // --split=N: layouts 1..N cut the region into N equal runs of blocks (e.g. K and V of
    // N/2 layers); layout 0 still covers every block.
    const std::uint32_t split = std::atoi(arg(argc, argv, "split", "0").c_str());
    for (std::uint32_t k = 0; split && k < split; ++k) {
        const std::uint32_t per = blocks / split;
        auto l = a.add_layout({*region, std::uint64_t(k) * per * block_bytes, block_bytes, 0, per});
        if (!l) {
            ch.send("ERR split " + l.message());
            return 1;
        }
    }
    std::vector<pdx::ReceivedNotification> notes;
    ch.send("DESC " + pdx::test::to_hex(a.descriptor()));

    for (;;) {
        a.progress();
        for (auto& n : a.drain_notifications()) {
            notes.push_back(std::move(n));
        }
        if (!ch.has_line()) {
            pollfd p[2] = {{fd, POLLIN, 0}, {a.event_fd(), POLLIN, 0}};
            if (a.arm()) {
                ::poll(p, 2, 10);
            }
            if (!(p[0].revents & POLLIN) && !ch.has_line()) {
                continue;
            }
        }
        auto line = ch.recv(0ms);
        if (!line) {
            pollfd p{fd, POLLIN, 0};
            if (::poll(&p, 1, 0) > 0 && (p.revents & (POLLHUP | POLLERR))) {
                return 0;  // test ended
            }
            continue;
        }
        std::istringstream in(*line);
        std::string cmd;
        in >> cmd;
        if (cmd == "PEER") {
            std::string hex;
            in >> hex;
            auto h = a.add_peer(pdx::test::from_hex(hex));
            ch.send(h ? "OK " + std::to_string(*h)
                      : std::string("ERR ") + pdx::to_string(h.status()) + " " + h.message());
        } else if (cmd == "FILL") {
            std::uint32_t seed = 0;
            in >> seed;
            for (std::uint32_t i = 0; i < blocks; ++i) {
                pdx::test::fill_block(a.block(*layout, i), seed, i);
            }
            ch.send("OK");
        } else if (cmd == "VERIFY") {
            std::uint32_t seed = 0;
            in >> seed;
            std::string pair, result = "OK";
            while (in >> pair) {
                auto colon = pair.find(':');
                std::uint32_t dst = std::stoul(pair.substr(0, colon));
                std::uint32_t src = std::stoul(pair.substr(colon + 1));
                auto bad = pdx::test::check_block(a.block(*layout, dst), seed, src);
                if (bad >= 0) {
                    result = "BAD " + std::to_string(dst) + " " + std::to_string(bad);
                    break;
                }
            }
            ch.send(result);
        } else if (cmd == "FREEZE") {
            int ms = 0;
            in >> ms;
            ch.send("OK");
            std::this_thread::sleep_for(std::chrono::milliseconds(ms));
        } else if (cmd == "WAITNOTE") {
            int kind = 0, ms = 0;
            std::uint64_t xfer = 0;
            in >> kind >> xfer >> ms;
            auto until = pdx::Clock::now() + std::chrono::milliseconds(ms);
            std::string reply = "TIMEOUT";
            for (;;) {
                for (auto& n : a.drain_notifications()) {
                    notes.push_back(std::move(n));
                }
                auto it = std::find_if(notes.begin(), notes.end(), [&](const auto& n) {
                    return static_cast<int>(n.notification.kind) == kind &&
                           n.notification.transfer_id == xfer;
                });
                if (it != notes.end()) {
                    reply = "OK " + it->notification.payload;
                    notes.erase(it);
                    break;
                }
                if (pdx::Clock::now() >= until) {
                    break;
                }
                a.progress();
                pollfd p{a.event_fd(), POLLIN, 0};
                if (a.arm()) {
                    ::poll(&p, 1, 5);
                }
            }
            ch.send(reply);
        } else if (cmd == "RELEASE") {  // unmaps the region (the descriptor sent is stale)
            auto r = a.release_region(*region);
            ch.send(r ? std::string("OK") : "ERR " + r.message());
        } else if (cmd == "WRITE") {
            pdx::PeerHandle h = 0;
            std::uint64_t xfer = 0;
            int ms = 0;
            in >> h >> xfer >> ms;
            std::vector<pdx::BlockId> src, dst;
            std::string pair;
            while (in >> pair) {
                const auto colon = pair.find(':');
                src.push_back(std::stoul(pair.substr(0, colon)));
                dst.push_back(std::stoul(pair.substr(colon + 1)));
            }
            pdx::TransferRequest w;
            w.peer = h;
            w.local_layout = *layout;
            w.local_ids = src;
            w.remote_layout = 0;
            w.remote_ids = dst;
            w.transfer_id = xfer;
            w.deadline = pdx::Clock::now() + std::chrono::milliseconds(ms);
            w.notify = pdx::Notification{pdx::NotifyKind::Done,
                                         xfer,
                                         0,
                                         1,
                                         pdx::Status::Ok,
                                         "written-" + std::to_string(xfer)};
            auto t = a.write_blocks(w);
            if (!t) {
                ch.send(std::string("ERR ") + pdx::to_string(t.status()) + " " + t.message());
                continue;
            }
            ch.send(std::string("OK ") + pdx::to_string(a.wait(*t, std::chrono::milliseconds(ms))));
        } else if (cmd == "ALIVE") {
            pdx::PeerHandle h = 0;
            in >> h;
            auto info = a.peer_info(h);
            ch.send(info ? "OK " + std::to_string(info->alive ? 1 : 0)
                         : std::string("ERR ") + pdx::to_string(info.status()));
        } else if (cmd == "FLOOD") {  // notes to a peer without end, until this process is killed
            pdx::PeerHandle h = 0;
            in >> h;
            // transfer_id counts up from 7: the receiver can see order and duplicates
            pdx::Notification n{pdx::NotifyKind::Register, 7, 0, 0, pdx::Status::Ok,
                                std::string(4000, 'f')};
            auto first = a.notify(h, n);
            ch.send(first ? std::string("OK") : "ERR " + first.message());
            while (first) {
                ++n.transfer_id;
                (void)a.notify(h, n);
                a.progress();
            }
        } else if (cmd == "QUIT") {
            ch.send("OK");
            return 0;
        } else {
            ch.send("ERR unknown command");
        }
    }
}
