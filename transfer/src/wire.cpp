#include "wire.hpp"

#include <cstring>
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

class Reader {
public:
    explicit Reader(std::span<const std::byte> in) : in_(in) {}
    bool ok() const { return ok_; }
    std::size_t left() const { return in_.size() - pos_; }
    std::uint8_t u8() { return static_cast<std::uint8_t>(le(1)); }
    std::uint16_t u16() { return static_cast<std::uint16_t>(le(2)); }
    std::uint32_t u32() { return static_cast<std::uint32_t>(le(4)); }
    std::uint64_t u64() { return le(8); }
    std::span<const std::byte> bytes() {
        std::uint32_t n = u32();
        if (!ok_ || n > left()) {
            ok_ = false;
            return {};
        }
        auto s = in_.subspan(pos_, n);
        pos_ += n;
        return s;
    }
    std::string str() {
        auto b = bytes();
        return std::string(reinterpret_cast<const char*>(b.data()), b.size());
    }

private:
    std::uint64_t le(int n) {
        if (!ok_ || left() < static_cast<std::size_t>(n)) {
            ok_ = false;
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
    bool ok_ = true;
};

}  // namespace

std::uint64_t fnv1a(std::span<const std::byte> data, std::uint64_t seed) {
    std::uint64_t h = seed;
    for (auto b : data) {
        h ^= std::to_integer<std::uint8_t>(b);
        h *= 0x100000001b3ull;
    }
    return h;
}

std::uint64_t compat_hash() {
    constexpr std::string_view kAbi =
        "pdx|descriptor-v1|notify-v1|layout(region,offset,block,stride,count)|le|am-write-v1";
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
    w.u64(d.compat);
    w.u64(d.instance);
    w.u8(static_cast<std::uint8_t>(d.backend));
    w.str(d.name);
    w.str(d.host_id);
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
    return w.take();
}

Result<Descriptor> decode_descriptor(std::span<const std::byte> blob) {
    if (blob.size() > kMaxDescriptorBytes) {
        return {Status::Invalid, "descriptor too large"};
    }
    Reader r(blob);
    if (r.u32() != kDescriptorMagic || !r.ok()) {
        return {Status::Invalid, "descriptor: bad magic"};
    }
    std::uint16_t version = r.u16();
    r.u16();
    if (version != kDescriptorVersion) {
        return {Status::Invalid, "descriptor: unsupported version " + std::to_string(version)};
    }
    Descriptor d;
    d.compat = r.u64();
    if (d.compat != compat_hash()) {
        return {Status::Invalid, "descriptor: compatibility hash mismatch"};
    }
    d.instance = r.u64();
    std::uint8_t backend = r.u8();
    if (backend > 1) {
        return {Status::Invalid, "descriptor: unknown backend"};
    }
    d.backend = static_cast<BackendKind>(backend);
    d.name = r.str();
    d.host_id = r.str();
    auto addr = r.bytes();
    d.address.assign(addr.begin(), addr.end());
    std::uint32_t nregions = r.u32();
    if (!r.ok() || nregions > r.left() / 20) {
        return {Status::Invalid, "descriptor: truncated regions"};
    }
    for (std::uint32_t i = 0; i < nregions; ++i) {
        RemoteRegion reg;
        reg.base = r.u64();
        reg.size = r.u64();
        auto rk = r.bytes();
        reg.rkey.assign(rk.begin(), rk.end());
        d.regions.push_back(std::move(reg));
    }
    std::uint32_t nlayouts = r.u32();
    if (!r.ok() || nlayouts > r.left() / 32) {
        return {Status::Invalid, "descriptor: truncated layouts"};
    }
    for (std::uint32_t i = 0; i < nlayouts; ++i) {
        Layout l;
        l.region = r.u32();
        l.offset = r.u64();
        l.block_bytes = r.u64();
        l.stride = r.u64();
        l.count = r.u32();
        if (!r.ok()) {
            break;
        }
        // The encoder writes the normalised stride: 0 ("dense") is a local convention only,
        // and taken as it is it would map every block of the layout onto block 0.
        if (l.stride == 0) {
            return {Status::Invalid, "descriptor: layout " + std::to_string(i) +
                                         " has stride 0 (must be the normalised stride, >= "
                                         "block bytes)"};
        }
        if (l.region >= d.regions.size() ||
            (d.regions[l.region].size != 0 && !layout_fits(l, d.regions[l.region].size))) {
            return {Status::Invalid, "descriptor: layout " + std::to_string(i) + " out of bounds"};
        }
        d.layouts.push_back(l);
    }
    if (!r.ok()) {
        return {Status::Invalid, "descriptor: truncated"};
    }
    if (r.left() != 0) {
        return {Status::Invalid, "descriptor: trailing bytes"};
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
    if (msg.size() < kNotifyHeaderBytes) {
        return {Status::Invalid, "notification: short header"};
    }
    Reader r(msg.first(kNotifyHeaderBytes));
    DecodedNotification d;
    if (r.u32() != kNotifyMagic) {
        return {Status::Invalid, "notification: bad magic"};
    }
    if (r.u16() != kNotifyVersion) {
        return {Status::Invalid, "notification: unsupported version"};
    }
    auto& h = d.header;
    h.kind = r.u8();
    h.flags = r.u8();
    h.transfer_id = r.u64();
    h.sequence = r.u32();
    h.expected = r.u32();
    h.status = static_cast<std::int32_t>(r.u32());
    h.payload_bytes = r.u32();
    h.sender = r.u64();
    if (h.kind < 1 || h.kind > 5) {
        return {Status::Invalid, "notification: unknown kind"};
    }
    if (h.payload_bytes != msg.size() - kNotifyHeaderBytes || h.payload_bytes > kMaxNotifyPayload) {
        return {Status::Invalid, "notification: bad payload length"};
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
