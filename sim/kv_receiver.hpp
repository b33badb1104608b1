#pragma once
// A decode's side of the LMCache-mode KV transport (sim/lmcache_wire.hpp): per TP rank an init
// and an alloc listener; KV frames are checked as they arrive (KvPattern) and recorded in the
// inbox, where the decode request claims them. Runs on the executor it is given (pdsim's strand).
#include "net/common/io.hpp"
#include "sim/lmcache_inbox.hpp"

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace pdr::sim {

struct ReceiverCounters {
    std::uint64_t handshakes = 0;
    std::uint64_t bad_handshakes = 0;   // wrong rank or not a Hello
    std::uint64_t frames_rejected = 0;  // bad header, wrong rank, too large, cut short
};

class KvLink;
struct KvHeader;

class KvReceiver {
public:
    // Serves one payload-less (pdx) KV frame whose header and req_id were read: answers on the
    // link and records the copy in the inbox. Returns false to close the connection.
    using PdxFrameFn = std::function<awaitable<bool>(KvLink& link, const KvHeader& header)>;

    KvReceiver(net::any_io_executor ex, Duration ttl, std::uint64_t max_bytes);
    ~KvReceiver();  // stop()
    KvReceiver(const KvReceiver&) = delete;
    KvReceiver& operator=(const KvReceiver&) = delete;

    // Binds rank r's listeners on host:init_ports[r] and host:alloc_ports[r] (0: any free
    // port; the bound ports are written back) and starts accepting. Throws std::system_error.
    void listen(const std::string& host, std::vector<unsigned short>& init_ports,
                std::vector<unsigned short>& alloc_ports);
    // pdx frames go to `fn`; without one they are refused as bad frames.
    void set_pdx_handler(PdxFrameFn fn);
    // Closes the listeners and every connection.
    void stop();

    // Drops every received copy and zeroes the counters (debug reset).
    void reset();
    LmcacheInbox& inbox() noexcept;
    const LmcacheInbox& inbox() const noexcept;
    const ReceiverCounters& counters() const noexcept;

    struct State;

private:
    std::shared_ptr<State> state_;
};

}  // namespace pdr::sim
