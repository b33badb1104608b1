#pragma once
// KvReadyGuard: who may connect to the kv-ready PULL socket (kv_ready_listener.hpp). It decides
// for the listener's ZAP handler (ZeroMQ RFC 27: libzmq asks inproc://zeromq.zap.01 about each
// new connection during its handshake, with the peer's address and, under CURVE, its public key).
//
//   auto g = KvReadyGuard::load(opts, error);   // reads the key files; nullopt + error if bad
//   g->judge("10.0.0.7", "CURVE", key32)  → Allowed | Address | Key
//
// - allow: CIDRs or addresses (config::allow_matches); empty: any address. An IPv4 peer on an
//   IPv6 socket is reported as ::ffff:a.b.c.d and judged as a.b.c.d.
// - CURVE (when a secret key file is given): the socket is a CURVE server with that key;
//   senders must know its public key (public_key_z85(), logged at start). With a clients file
//   only the keys listed there, and this router's own public key (what peer replicas sharing the
//   key forward with), are accepted; without one any key is.
// Key files: Z85 text (40 characters per key); blank lines and lines starting with '#' are
// skipped. The secret key file holds one key.
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace pdr::kv {

struct KvReadyGuardOptions {
    std::vector<std::string> allow = {};
    std::string curve_secret_key_file = {};
    std::string curve_clients_file = {};
};

class KvReadyGuard {
public:
    enum class Verdict { Allowed, Address, Key };

    // nullopt with `error` set when a key file cannot be read or holds no valid key, or CURVE is
    // asked for and this libzmq was built without it.
    static std::optional<KvReadyGuard> load(const KvReadyGuardOptions& o, std::string& error);

    // Whether the socket needs a ZAP handler at all (an allow-list or CURVE).
    bool active() const noexcept { return !allow_.empty() || curve(); }
    bool curve() const noexcept { return !secret_z85_.empty(); }
    const std::string& secret_key_z85() const noexcept { return secret_z85_; }
    const std::string& public_key_z85() const noexcept { return public_z85_; }

    // `address` as ZAP gives it; `mechanism` "NULL", "PLAIN" or "CURVE"; `credential` the
    // client's 32-byte public key under CURVE (ignored otherwise).
    Verdict judge(std::string_view address, std::string_view mechanism,
                  std::string_view credential) const;

private:
    std::vector<std::string> allow_;
    std::string secret_z85_;
    std::string public_z85_;
    std::set<std::string> clients_z85_;  // empty: any key
};

std::string_view to_string(KvReadyGuard::Verdict v) noexcept;  // "allowed", "address", "key"

}  // namespace pdr::kv
