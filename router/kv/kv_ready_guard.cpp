// KvReadyGuard: the allow-list and CURVE keys of the kv-ready socket, and the ZAP verdicts.
#include "router/kv/kv_ready_guard.hpp"

#include <array>
#include <cstdint>
#include <fstream>

#include <zmq.h>

#include "config/ascii.hpp"
#include "config/config.hpp"

namespace pdr::kv {

namespace {

constexpr std::size_t kZ85KeyChars = 40;
constexpr std::size_t kKeyBytes = 32;
constexpr std::size_t kMaxKeyFileBytes = 4u << 20;  // ~100k keys

bool valid_z85_key(std::string_view text) {
    if (text.size() != kZ85KeyChars) {
        return false;
    }
    const std::string z(text);
    std::array<std::uint8_t, kKeyBytes> bytes{};
    return zmq_z85_decode(bytes.data(), z.c_str()) != nullptr;
}

// The keys of a file (see the header for its format); false with `error` set.
bool read_keys(const std::string& path, const char* what, std::vector<std::string>& keys,
               std::string& error) {
    std::ifstream in(path, std::ios::binary);
    if (!in) {
        error = std::string("cannot read the ") + what + " file " + path;
        return false;
    }
    std::string text(kMaxKeyFileBytes + 1, '\0');
    in.read(text.data(), static_cast<std::streamsize>(text.size()));
    text.resize(static_cast<std::size_t>(in.gcount()));
    if (text.size() > kMaxKeyFileBytes) {
        error = std::string("the ") + what + " file " + path + " is over " +
                std::to_string(kMaxKeyFileBytes >> 20) + " MiB";
        return false;
    }
    std::size_t line_no = 0;
    for (std::size_t at = 0; at <= text.size();) {
        const std::size_t end = std::min(text.find('\n', at), text.size());
        const std::string_view line = ascii::trim(std::string_view(text).substr(at, end - at));
        ++line_no;
        at = end + 1;
        if (line.empty() || line.front() == '#') {
            continue;
        }
        if (!valid_z85_key(line)) {
            error = std::string("the ") + what + " file " + path + ", line " +
                    std::to_string(line_no) + ": expected a Z85 key of 40 characters";
            return false;
        }
        keys.emplace_back(line);
    }
    if (keys.empty()) {
        error = std::string("the ") + what + " file " + path + " holds no key";
        return false;
    }
    return true;
}

// An IPv4 peer of an IPv6 socket, as its IPv4 address.
std::string_view plain_address(std::string_view address) {
    constexpr std::string_view kMapped = "::ffff:";
    if (ascii::istarts_with(address, kMapped) &&
        address.find(':', kMapped.size()) == std::string_view::npos &&
        address.find('.', kMapped.size()) != std::string_view::npos) {
        return address.substr(kMapped.size());
    }
    return address;
}

}  // namespace

std::optional<KvReadyGuard> KvReadyGuard::load(const KvReadyGuardOptions& o, std::string& error) {
    KvReadyGuard g;
    g.allow_ = o.allow;
    if (o.curve_secret_key_file.empty()) {
        return g;
    }
    if (!zmq_has("curve")) {
        error = "--kv-ready-curve-secret-key-file: this libzmq was built without CURVE";
        return std::nullopt;
    }
    std::vector<std::string> secret;
    if (!read_keys(o.curve_secret_key_file, "CURVE secret key", secret, error)) {
        return std::nullopt;
    }
    if (secret.size() != 1) {
        error = "the CURVE secret key file " + o.curve_secret_key_file + " holds " +
                std::to_string(secret.size()) + " keys; give one";
        return std::nullopt;
    }
    std::array<char, kZ85KeyChars + 1> pub{};
    if (zmq_curve_public(pub.data(), secret.front().c_str()) != 0) {
        error = "the CURVE secret key in " + o.curve_secret_key_file + " is not usable";
        return std::nullopt;
    }
    g.secret_z85_ = secret.front();
    g.public_z85_ = pub.data();
    if (!o.curve_clients_file.empty()) {
        std::vector<std::string> clients;
        if (!read_keys(o.curve_clients_file, "CURVE clients", clients, error)) {
            return std::nullopt;
        }
        g.clients_z85_.insert(clients.begin(), clients.end());
        g.clients_z85_.insert(g.public_z85_);  // peer replicas forward with the shared key
    }
    return g;
}

KvReadyGuard::Verdict KvReadyGuard::judge(std::string_view address, std::string_view mechanism,
                                          std::string_view credential) const {
    if (!allow_.empty() && !config::allow_matches(allow_, plain_address(address))) {
        return Verdict::Address;
    }
    if (!curve()) {
        return Verdict::Allowed;
    }
    if (mechanism != "CURVE" || credential.size() != kKeyBytes) {
        return Verdict::Key;  // libzmq refuses these itself on a CURVE server; never allowed
    }
    if (clients_z85_.empty()) {
        return Verdict::Allowed;
    }
    std::array<char, kZ85KeyChars + 1> z85{};
    if (zmq_z85_encode(z85.data(), reinterpret_cast<const std::uint8_t*>(credential.data()),
                       kKeyBytes) == nullptr) {
        return Verdict::Key;
    }
    return clients_z85_.count(z85.data()) ? Verdict::Allowed : Verdict::Key;
}

std::string_view to_string(KvReadyGuard::Verdict v) noexcept {
    switch (v) {
        case KvReadyGuard::Verdict::Allowed:
            return "allowed";
        case KvReadyGuard::Verdict::Address:
            return "address";
        case KvReadyGuard::Verdict::Key:
            return "key";
    }
    return "key";
}

}  // namespace pdr::kv
