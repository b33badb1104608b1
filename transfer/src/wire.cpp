#include "wire.hpp"

#include <array>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string_view>

namespace pdx::detail {
namespace {

class Writer {
public:
    void u8(std::uint8_t v) { out_.push_back(std::byte{v}); }
    void u16(std::uint16_t v) { le(v, 2); }
    void u32(std::uint32_t v) { le(v, 4); }
    void u64(std::uint64_t v) { le(v, 8); }
    void bytes(std::span<const std::byte> b) {
        u32(static_cast<std::uint32_t>(b.size()));
        out_.insert(out_.end(), b.begin(), b.end());
    }
    void str(std::string_view s) { bytes(std::as_bytes(std::span(s.data(), s.size()))); }
    std::vector<std::byte> take() { return std::move(out_); }

private:
    void le(std::uint64_t v, int n) {
        for (int i = 0; i < n; ++i) {
            out_.push_back(std::byte(static_cast<std::uint8_t>(v >> (8 * i))));
        }
    }
    std::vector<std::byte> out_;
};

// Reads little-endian fields; the first read past the end (or a length past its bound) stops
// it, and error() then says which field, where, and how many bytes were missing.
class Reader {
public:
    explicit Reader(std::span<const std::byte> in, std::size_t pos = 0) : in_(in), pos_(pos) {}
    bool ok() const { return error_.empty(); }
    const std::string& error() const { return error_; }
    std::size_t left() const { return in_.size() - pos_; }
    std::size_t pos() const { return pos_; }
    std::uint8_t u8(const char* what) { return static_cast<std::uint8_t>(le(1, what)); }
    std::uint16_t u16(const char* what) { return static_cast<std::uint16_t>(le(2, what)); }
    std::uint32_t u32(const char* what) { return static_cast<std::uint32_t>(le(4, what)); }
    std::uint64_t u64(const char* what) { return le(8, what); }
    // A u32 length, then that many bytes (at most `max`).
    std::span<const std::byte> bytes(const char* what, std::size_t max) {
        const std::size_t at = pos_;
        std::uint32_t n = u32(what);
        if (!ok()) {
            return {};
        }
        if (n > max) {
            fail(std::string(what) + " length " + std::to_string(n) + " at offset " +
                 std::to_string(at) + " exceeds its limit of " + std::to_string(max));
            return {};
        }
        if (n > left()) {
            truncated(what, n, at);
            return {};
        }
        auto s = in_.subspan(pos_, n);
        pos_ += n;
        return s;
    }
    std::string str(const char* what, std::size_t max) {
        auto b = bytes(what, max);
        return std::string(reinterpret_cast<const char*>(b.data()), b.size());
    }
    void fail(std::string message) {
        if (ok()) {
            error_ = std::move(message);
        }
    }

private:
    void truncated(const char* what, std::size_t need, std::size_t at) {
        fail("truncated: " + std::string(what) + " at offset " + std::to_string(at) + " needs " +
             std::to_string(need) + " bytes, " + std::to_string(left()) + " left");
    }
    std::uint64_t le(int n, const char* what) {
        if (!ok()) {
            return 0;
        }
        if (left() < static_cast<std::size_t>(n)) {
            truncated(what, static_cast<std::size_t>(n), pos_);
            return 0;
        }
        std::uint64_t v = 0;
        for (int i = 0; i < n; ++i) {
            v |= std::uint64_t(std::to_integer<std::uint8_t>(in_[pos_ + i])) << (8 * i);
        }
        pos_ += n;
        return v;
    }
    std::span<const std::byte> in_;
    std::size_t pos_ = 0;
    std::string error_;
};

// CRC32C lookup table (reflected Castagnoli polynomial), built at compile time.
constexpr std::array<std::uint32_t, 256> make_crc32c_table() {
    std::array<std::uint32_t, 256> t{};
    for (std::uint32_t i = 0; i < 256; ++i) {
        std::uint32_t c = i;
        for (int k = 0; k < 8; ++k) {
            c = (c & 1) ? (c >> 1) ^ 0x82f63b78u : c >> 1;
        }
        t[i] = c;
    }
    return t;
}
constexpr auto kCrc32cTable = make_crc32c_table();

void store_u32(std::span<std::byte> out, std::size_t at, std::uint32_t v) {
    for (int i = 0; i < 4; ++i) {
        out[at + i] = std::byte(static_cast<std::uint8_t>(v >> (8 * i)));
    }
}

// The CRC32C of a blob with its own CRC field (bytes 12..15) taken as zero.
std::uint32_t blob_crc(std::span<const std::byte> blob) {
    constexpr std::byte kZero[4] = {};
    std::uint32_t c = crc32c(blob.first(12));
    c = crc32c(kZero, c);
    return crc32c(blob.subspan(kDescriptorHeaderBytes), c);
}

// The fixed headers, field by field: a message cut inside one names the field and its offset.
struct HeaderField {
    std::size_t offset;
    const char* name;
};
constexpr HeaderField kDescriptorHeader[] = {
    {0, "magic"}, {4, "version"}, {6, "reserved"}, {8, "length"}, {12, "checksum"}};
constexpr HeaderField kNotifyHeader[] = {
    {0, "magic"},           {4, "version"},         {6, "kind"},      {7, "flags"},
    {8, "transfer id"},     {16, "sequence"},       {20, "expected"}, {24, "status"},
    {28, "payload length"}, {32, "sender instance"}};

// "N bytes, the header needs H (cut in 'field' at offset O)" for a message shorter than H.
template <std::size_t K>
std::string header_cut(std::size_t got, std::size_t header, const HeaderField (&fields)[K]) {
    const HeaderField* cut = &fields[0];
    for (const auto& f : fields) {
        if (f.offset <= got) {
            cut = &f;
        }
    }
    return "truncated: " + std::to_string(got) + " bytes, the header needs " +
           std::to_string(header) + " (cut in '" + cut->name + "' at offset " +
           std::to_string(cut->offset) + ")";
}

std::string hex32(std::uint32_t v) {
    char buf[16];
    std::snprintf(buf, sizeof buf, "0x%08x", v);
    return buf;
}

}  // namespace

std::uint64_t fnv1a(std::span<const std::byte> data, std::uint64_t seed) {
    std::uint64_t h = seed;
    for (auto b : data) {
        h ^= std::to_integer<std::uint8_t>(b);
        h *= 0x100000001b3ull;
    }
    return h;
}

std::uint32_t crc32c(std::span<const std::byte> data, std::uint32_t crc) {
    crc = ~crc;
    for (auto b : data) {
        crc = kCrc32cTable[(crc ^ std::to_integer<std::uint8_t>(b)) & 0xff] ^ (crc >> 8);
    }
    return ~crc;
}

std::uint64_t compat_hash() {
    constexpr std::string_view kAbi =
        "pdx|descriptor-v2|notify-v1|layout(region,offset,block,stride,count)|le|am-write-v1|"
        "ucx-address-v2";
    return fnv1a(std::as_bytes(std::span(kAbi.data(), kAbi.size())));
}

bool layout_fits(const Layout& l, std::uint64_t region_bytes) {
    if (l.block_bytes == 0 || l.count == 0) {
        return false;
    }
    std::uint64_t stride = l.stride ? l.stride : l.block_bytes;
    if (stride < l.block_bytes) {
        return false;
    }
    std::uint64_t span_bytes = 0;
    if (__builtin_mul_overflow(stride, std::uint64_t(l.count - 1), &span_bytes)) {
        return false;
    }
    if (__builtin_add_overflow(span_bytes, l.block_bytes, &span_bytes)) {
        return false;
    }
    if (__builtin_add_overflow(span_bytes, l.offset, &span_bytes)) {
        return false;
    }
    return span_bytes <= region_bytes;
}

std::vector<std::byte> encode_descriptor(const Descriptor& d) {
    Writer w;
    w.u32(kDescriptorMagic);
    w.u16(kDescriptorVersion);
    w.u16(0);
    w.u32(0);  // total length, then the CRC32C: sealed below
    w.u32(0);
    w.u64(d.compat);
    w.u64(d.instance);
    w.u8(static_cast<std::uint8_t>(d.backend));
    w.str(d.name);
    w.str(d.host_id);
    w.u32(d.process.pid);
    w.u64(d.process.start_time);
    w.u64(d.process.pid_ns);
    w.bytes(d.address);
    w.u32(static_cast<std::uint32_t>(d.regions.size()));
    for (const auto& r : d.regions) {
        w.u64(r.base);
        w.u64(r.size);
        w.bytes(r.rkey);
    }
    w.u32(static_cast<std::uint32_t>(d.layouts.size()));
    for (const auto& l : d.layouts) {
        w.u32(l.region);
        w.u64(l.offset);
        w.u64(l.block_bytes);
        w.u64(l.stride ? l.stride : l.block_bytes);
        w.u32(l.count);
    }
    auto out = w.take();
    reseal_descriptor(out);
    return out;
}

void reseal_descriptor(std::span<std::byte> blob) {
    if (blob.size() < kDescriptorHeaderBytes) {
        return;
    }
    store_u32(blob, 8, static_cast<std::uint32_t>(blob.size()));
    store_u32(blob, 12, 0);
    store_u32(blob, 12, blob_crc(blob));
}

Result<Descriptor> decode_descriptor(std::span<const std::byte> blob) {
    auto refuse = [](std::string why) -> Result<Descriptor> {
        return {Status::Invalid, "descriptor: " + std::move(why)};
    };
    if (blob.size() > kMaxDescriptorBytes) {
        return refuse("too large: " + std::to_string(blob.size()) + " bytes (limit " +
                      std::to_string(kMaxDescriptorBytes) + ")");
    }
    if (blob.size() < kDescriptorHeaderBytes) {
        return refuse(header_cut(blob.size(), kDescriptorHeaderBytes, kDescriptorHeader));
    }
    // The header and the checksum, before anything else is read.
    Reader h(blob);
    if (const std::uint32_t magic = h.u32("magic"); magic != kDescriptorMagic) {
        return refuse("bad magic " + hex32(magic) + " at offset 0, expected " +
                      hex32(kDescriptorMagic) + " (not a pdx descriptor)");
    }
    const std::uint16_t version = h.u16("version");
    h.u16("reserved");
    if (version != kDescriptorVersion) {
        return refuse("unsupported version " + std::to_string(version) +
                      " at offset 4 (this build reads " + std::to_string(kDescriptorVersion) + ")");
    }
    const std::uint32_t length = h.u32("length");
    const std::uint32_t crc = h.u32("checksum");
    if (length != blob.size()) {
        return refuse(length > blob.size()
                          ? "truncated: " + std::to_string(blob.size()) + " of the " +
                                std::to_string(length) +
                                " bytes its length field (offset 8) announces"
                          : std::to_string(blob.size() - length) + " trailing bytes after the " +
                                std::to_string(length) + " its length field (offset 8) announces");
    }
    if (const std::uint32_t actual = blob_crc(blob); crc != actual) {
        return refuse("checksum mismatch: the field at offset 12 says " + hex32(crc) +
                      ", the blob's CRC32C is " + hex32(actual) + " (corrupt blob)");
    }
    Reader r(blob, kDescriptorHeaderBytes);
    Descriptor d;
    d.compat = r.u64("compat hash");
    if (r.ok() && d.compat != compat_hash()) {
        return refuse("compatibility hash mismatch");
    }
    d.instance = r.u64("instance");
    std::uint8_t backend = r.u8("backend");
    if (r.ok() && backend > 1) {
        return refuse("unknown backend " + std::to_string(backend));
    }
    d.backend = static_cast<BackendKind>(backend);
    d.name = r.str("name", kMaxNameBytes);
    d.host_id = r.str("host id", kMaxHostIdBytes);
    d.process.pid = r.u32("pid");
    d.process.start_time = r.u64("start time");
    d.process.pid_ns = r.u64("pid namespace");
    auto addr = r.bytes("worker address", kMaxAddressBytes);
    d.address.assign(addr.begin(), addr.end());
    // A count of records of `record` bytes each must fit in what is left.
    auto count = [&](const char* what, std::size_t record) -> std::optional<std::uint32_t> {
        const std::size_t at = r.pos();
        const std::uint32_t n = r.u32(what);
        if (r.ok() && n > r.left() / record) {
            r.fail(std::string(what) + " " + std::to_string(n) + " at offset " +
                   std::to_string(at) + " needs more than the " + std::to_string(r.left()) +
                   " bytes left");
        }
        return r.ok() ? std::optional(n) : std::nullopt;
    };
    const std::uint32_t nregions = count("region count", 20).value_or(0);
    for (std::uint32_t i = 0; r.ok() && i < nregions; ++i) {
        RemoteRegion reg;
        reg.base = r.u64("region base");
        reg.size = r.u64("region size");
        auto rk = r.bytes("rkey", kMaxRkeyBytes);
        std::uint64_t end = 0;
        if (r.ok() && __builtin_add_overflow(reg.base, reg.size, &end)) {
            return refuse("region " + std::to_string(i) + " wraps the address space");
        }
        if (r.ok() && reg.size != 0 && reg.base == 0) {
            return refuse("region " + std::to_string(i) + " has a null base");
        }
        reg.rkey.assign(rk.begin(), rk.end());
        d.regions.push_back(std::move(reg));
    }
    const std::uint32_t nlayouts = count("layout count", 32).value_or(0);
    for (std::uint32_t i = 0; r.ok() && i < nlayouts; ++i) {
        Layout l;
        l.region = r.u32("layout region");
        l.offset = r.u64("layout offset");
        l.block_bytes = r.u64("layout block bytes");
        l.stride = r.u64("layout stride");
        l.count = r.u32("layout count");
        if (!r.ok()) {
            break;
        }
        // The encoder writes the normalised stride: 0 ("dense") is a local convention only,
        // and taken as it is it would map every block of the layout onto block 0.
        if (l.stride == 0) {
            return refuse("layout " + std::to_string(i) +
                          " has stride 0 (must be the normalised stride, >= block bytes)");
        }
        if (l.region >= d.regions.size()) {
            return refuse("layout " + std::to_string(i) + " names region " +
                          std::to_string(l.region) + " of " + std::to_string(d.regions.size()));
        }
        if (d.regions[l.region].size != 0 && !layout_fits(l, d.regions[l.region].size)) {
            return refuse("layout " + std::to_string(i) + " does not fit region " +
                          std::to_string(l.region) + " (" +
                          std::to_string(d.regions[l.region].size) + " bytes)");
        }
        d.layouts.push_back(l);
    }
    if (!r.ok()) {
        return refuse(r.error());
    }
    if (r.left() != 0) {
        return refuse(std::to_string(r.left()) + " trailing bytes after the layouts");
    }
    return d;
}

std::vector<std::byte> encode_notification(const Notification& n, std::uint8_t flags,
                                           std::uint64_t sender) {
    Writer w;
    w.u32(kNotifyMagic);
    w.u16(kNotifyVersion);
    w.u8(static_cast<std::uint8_t>(n.kind));
    w.u8(flags);
    w.u64(n.transfer_id);
    w.u32(n.sequence);
    w.u32(n.expected);
    w.u32(static_cast<std::uint32_t>(n.status));
    w.u32(static_cast<std::uint32_t>(n.payload.size()));
    w.u64(sender);
    auto out = w.take();
    const auto* p = reinterpret_cast<const std::byte*>(n.payload.data());
    out.insert(out.end(), p, p + n.payload.size());
    return out;
}

Result<DecodedNotification> decode_notification(std::span<const std::byte> msg) {
    auto refuse = [](std::string why) -> Result<DecodedNotification> {
        return {Status::Invalid, "notification: " + std::move(why)};
    };
    if (msg.size() < kNotifyHeaderBytes) {
        return refuse(header_cut(msg.size(), kNotifyHeaderBytes, kNotifyHeader));
    }
    Reader r(msg.first(kNotifyHeaderBytes));
    DecodedNotification d;
    if (const std::uint32_t magic = r.u32("magic"); magic != kNotifyMagic) {
        return refuse("bad magic " + hex32(magic) + " at offset 0, expected " +
                      hex32(kNotifyMagic));
    }
    if (const std::uint16_t version = r.u16("version"); version != kNotifyVersion) {
        return refuse("unsupported version " + std::to_string(version) +
                      " at offset 4 (this build reads " + std::to_string(kNotifyVersion) + ")");
    }
    auto& h = d.header;
    h.kind = r.u8("kind");
    h.flags = r.u8("flags");
    h.transfer_id = r.u64("transfer id");
    h.sequence = r.u32("sequence");
    h.expected = r.u32("expected");
    h.status = static_cast<std::int32_t>(r.u32("status"));
    h.payload_bytes = r.u32("payload length");
    h.sender = r.u64("sender");
    if (h.kind < 1 || h.kind > 5) {
        return refuse("unknown kind " + std::to_string(h.kind) + " at offset 6 (expected 1-5)");
    }
    const std::size_t body = msg.size() - kNotifyHeaderBytes;
    if (h.payload_bytes > kMaxNotifyPayload) {
        return refuse("payload length " + std::to_string(h.payload_bytes) +
                      " at offset 28 exceeds its limit of " + std::to_string(kMaxNotifyPayload));
    }
    if (h.payload_bytes > body) {
        return refuse("truncated: payload at offset 40 needs " + std::to_string(h.payload_bytes) +
                      " bytes (payload length, offset 28), " + std::to_string(body) + " left");
    }
    if (h.payload_bytes < body) {
        return refuse(std::to_string(body - h.payload_bytes) + " trailing bytes after the " +
                      std::to_string(h.payload_bytes) +
                      "-byte payload its length field (offset 28) announces");
    }
    auto& n = d.notification;
    n.kind = static_cast<NotifyKind>(h.kind);
    n.transfer_id = h.transfer_id;
    n.sequence = h.sequence;
    n.expected = h.expected;
    n.status = static_cast<Status>(h.status);
    n.payload.assign(reinterpret_cast<const char*>(msg.data()) + kNotifyHeaderBytes,
                     h.payload_bytes);
    return d;
}

}  // namespace pdx::detail
