// Wire formats (descriptor, notification header), request planning (validation, sort, merge),
// the lease table, the latency-stats clock and the completed-transfer history.
#include <gtest/gtest.h>

#include <cstring>
#include <deque>
#include <map>
#include <random>

#include "history.hpp"
#include "latency_clock.hpp"
#include "lease_table.hpp"
#include "plan.hpp"
#include "ucx_address.hpp"
#include "wire.hpp"

namespace pdx::detail {
namespace {

Descriptor sample() {
    Descriptor d;
    d.compat = compat_hash();
    d.instance = 0x1122334455667788ull;
    d.backend = BackendKind::Loopback;
    d.name = "prefill-0";
    d.host_id = "host/boot";
    d.process = {4242, 987654321, 4026531836};
    d.address = {std::byte{1}, std::byte{2}, std::byte{3}};
    d.regions.push_back({0x10000, 1 << 20, {std::byte{9}, std::byte{8}}});
    d.layouts.push_back(Layout{0, 4096, 4096, 8192, 64});
    return d;
}

// The compatibility hash is part of the wire format (docs/transfer.md): a change to what both
// sides must agree on changes the string it hashes, and this value with it, on purpose.
TEST(Descriptor, CompatibilityHashIsTheDocumentedOne) {
    EXPECT_EQ(compat_hash(), 0x33bdeecf5d9c5590ull);
    const std::string_view single =
        "pdx|descriptor-v2|notify-v1|layout(region,offset,block,stride,count)|le|am-write-v1";
    EXPECT_EQ(fnv1a(std::as_bytes(std::span(single.data(), single.size()))),
              0x382a92aed956b6a0ull);  // UCX addresses without framing: refused
    const std::string_view before =
        "pdx|descriptor-v1|notify-v1|layout(region,offset,block,stride,count)|le";
    EXPECT_EQ(fnv1a(std::as_bytes(std::span(before.data(), before.size()))),
              0xb1e0a5622874185full);  // agents without Am writes: refused
    const std::string_view v1 =
        "pdx|descriptor-v1|notify-v1|layout(region,offset,block,stride,count)|le|am-write-v1";
    EXPECT_EQ(fnv1a(std::as_bytes(std::span(v1.data(), v1.size()))),
              0xa540d07f2077e735ull);  // descriptors without checksum or process: refused
}

TEST(Descriptor, RoundTripsAndIsLittleEndian) {
    auto blob = encode_descriptor(sample());
    ASSERT_GE(blob.size(), 24u);
    EXPECT_EQ(std::to_integer<int>(blob[0]), 'P');
    EXPECT_EQ(std::to_integer<int>(blob[1]), 'D');
    EXPECT_EQ(std::to_integer<int>(blob[2]), 'X');
    EXPECT_EQ(std::to_integer<int>(blob[3]), 'D');
    EXPECT_EQ(std::to_integer<int>(blob[4]), 2);  // version, low byte first
    EXPECT_EQ(std::to_integer<int>(blob[8]), static_cast<int>(blob.size() & 0xff));  // length
    EXPECT_EQ(std::to_integer<int>(blob[24]), 0x88);  // instance LSB at offset 24
    auto d = decode_descriptor(blob);
    ASSERT_TRUE(d) << d.message();
    EXPECT_EQ(d->name, "prefill-0");
    EXPECT_EQ(d->instance, 0x1122334455667788ull);
    EXPECT_EQ(d->host_id, "host/boot");
    EXPECT_EQ(d->process.pid, 4242u);
    EXPECT_EQ(d->process.start_time, 987654321u);
    EXPECT_EQ(d->process.pid_ns, 4026531836u);
    ASSERT_EQ(d->regions.size(), 1u);
    EXPECT_EQ(d->regions[0].base, 0x10000u);
    EXPECT_EQ(d->regions[0].rkey.size(), 2u);
    ASSERT_EQ(d->layouts.size(), 1u);
    EXPECT_EQ(d->layouts[0].stride, 8192u);
    EXPECT_EQ(d->layouts[0].count, 64u);
}

TEST(Crc32c, MatchesTheCastagnoliCheckValue) {
    const std::string_view check = "123456789";
    EXPECT_EQ(crc32c(std::as_bytes(std::span(check.data(), check.size()))), 0xe3069283u);
    EXPECT_EQ(crc32c({}), 0u);
    // continued over two pieces: the same as over the whole
    auto b = std::as_bytes(std::span(check.data(), check.size()));
    EXPECT_EQ(crc32c(b.subspan(4), crc32c(b.first(4))), 0xe3069283u);
}

// Every truncation and every single-byte change of a valid blob is refused with a message that
// says why; nothing past the header is read before the checksum matched.
TEST(Descriptor, RefusesEveryTruncationAndEveryByteFlip) {
    const auto blob = encode_descriptor(sample());
    for (std::size_t n = 0; n < blob.size(); ++n) {
        auto d = decode_descriptor(std::span(blob).first(n));
        ASSERT_FALSE(d) << "prefix " << n;
        EXPECT_EQ(d.status(), Status::Invalid);
        EXPECT_NE(d.message().find("truncated"), std::string::npos) << n << ": " << d.message();
    }
    for (std::size_t i = 0; i < blob.size(); ++i) {
        for (std::uint8_t flip : {0x01, 0x80, 0xff}) {
            auto bad = blob;
            bad[i] ^= std::byte{flip};
            auto d = decode_descriptor(bad);
            ASSERT_FALSE(d) << "byte " << i << " ^ " << int(flip);
            EXPECT_EQ(d.status(), Status::Invalid);
        }
    }
    auto bad = blob;
    bad[0] = std::byte{0};
    EXPECT_NE(decode_descriptor(bad).message().find("magic"), std::string::npos);
    bad = blob;
    bad[4] = std::byte{1};
    EXPECT_NE(decode_descriptor(bad).message().find("unsupported version 1"), std::string::npos);
    bad = blob;
    bad[40] ^= std::byte{1};
    EXPECT_NE(decode_descriptor(bad).message().find("checksum"), std::string::npos);
    bad = blob;
    bad.push_back(std::byte{0});
    EXPECT_NE(decode_descriptor(bad).message().find("1 trailing bytes"), std::string::npos)
        << decode_descriptor(bad).message();
    EXPECT_NE(decode_descriptor(std::span(blob).first(20)).message().find("20 of"),
              std::string::npos);
}

// With a valid checksum (a blob built wrongly, or on purpose) every field is still checked.
TEST(Descriptor, ChecksBoundsBehindAValidChecksum) {
    auto sealed = [](Descriptor d) { return decode_descriptor(encode_descriptor(d)); };
    auto d = sample();
    d.layouts[0].count = 1000;  // leaves the region
    EXPECT_NE(sealed(d).message().find("does not fit region"), std::string::npos);
    d = sample();
    d.layouts[0].region = 3;
    EXPECT_NE(sealed(d).message().find("names region 3"), std::string::npos);
    d = sample();
    d.regions[0].base = ~std::uint64_t{0} - 100;  // base + size wraps
    EXPECT_NE(sealed(d).message().find("wraps"), std::string::npos);
    d = sample();
    d.name.assign(kMaxNameBytes + 1, 'x');
    EXPECT_NE(sealed(d).message().find("name length"), std::string::npos);
    d = sample();
    d.compat ^= 1;
    EXPECT_NE(sealed(d).message().find("compatibility"), std::string::npos);

    // A length that points past the end, resealed: refused as truncated, saying which field.
    auto blob = encode_descriptor(sample());
    const std::size_t name_len_at = 16 + 8 + 8 + 1;
    blob[name_len_at] = std::byte{200};
    reseal_descriptor(blob);
    auto r = decode_descriptor(blob);
    ASSERT_FALSE(r);
    EXPECT_NE(r.message().find("name"), std::string::npos) << r.message();

    // Random changes, resealed so that the parser sees them: refused, or every layout fits.
    std::mt19937 rng(7);
    const auto good = encode_descriptor(sample());
    for (int i = 0; i < 20000; ++i) {
        auto m = good;
        const int changes = 1 + int(rng() % 4);
        for (int c = 0; c < changes; ++c) {
            m[16 + rng() % (m.size() - 16)] = std::byte(static_cast<std::uint8_t>(rng()));
        }
        if (rng() % 4 == 0) {
            m.resize(16 + rng() % (m.size() - 16));
        }
        reseal_descriptor(m);
        auto out = decode_descriptor(m);
        if (out) {
            for (const auto& l : out->layouts) {
                ASSERT_LT(l.region, out->regions.size());
                const auto& reg = out->regions[l.region];
                EXPECT_TRUE(reg.size == 0 || layout_fits(l, reg.size));
            }
        }
    }
}

TEST(NotifyHeader, FixedFortyBytesLittleEndian) {
    Notification n;
    n.kind = NotifyKind::Register;
    n.transfer_id = 0x0102030405060708ull;
    n.sequence = 7;
    n.expected = 9;
    n.status = Status::Expired;
    n.payload = "abc";
    auto m = encode_notification(n, 0, 0xAABBull);
    ASSERT_EQ(m.size(), kNotifyHeaderBytes + 3);
    EXPECT_EQ(std::memcmp(m.data(), "PDXN", 4), 0);
    EXPECT_EQ(std::to_integer<int>(m[6]), 3);      // kind
    EXPECT_EQ(std::to_integer<int>(m[8]), 0x08);   // transfer id LSB
    EXPECT_EQ(std::to_integer<int>(m[16]), 7);     // sequence
    EXPECT_EQ(std::to_integer<int>(m[20]), 9);     // expected
    EXPECT_EQ(std::to_integer<int>(m[24]), 3);     // status
    EXPECT_EQ(std::to_integer<int>(m[28]), 3);     // payload length
    EXPECT_EQ(std::to_integer<int>(m[32]), 0xBB);  // sender
    auto d = decode_notification(m);
    ASSERT_TRUE(d) << d.message();
    EXPECT_EQ(d->notification.kind, NotifyKind::Register);
    EXPECT_EQ(d->notification.transfer_id, n.transfer_id);
    EXPECT_EQ(d->notification.status, Status::Expired);
    EXPECT_EQ(d->notification.payload, "abc");
    EXPECT_EQ(d->header.sender, 0xAABBu);
    m.pop_back();  // payload length no longer matches
    EXPECT_FALSE(decode_notification(m));
    m = encode_notification(n, 0, 1);
    m[6] = std::byte{42};
    EXPECT_FALSE(decode_notification(m));
}

// Every truncation says which field was cut, at which offset, and how much was expected
// against how much came (issue 20: "messages for truncated blobs are vague").
TEST(Wire, TruncationMessagesNameTheFieldItsOffsetAndTheSizes) {
    const auto blob = encode_descriptor(sample());
    const std::string total = std::to_string(blob.size());
    const std::pair<std::size_t, const char*> header_cuts[] = {
        {0, "cut in 'magic' at offset 0"},
        {5, "cut in 'version' at offset 4"},
        {7, "cut in 'reserved' at offset 6"},
        {11, "cut in 'length' at offset 8"},
        {15, "cut in 'checksum' at offset 12"}};
    for (auto [n, says] : header_cuts) {
        const std::string m = decode_descriptor(std::span(blob).first(n)).message();
        EXPECT_NE(m.find("truncated: " + std::to_string(n) + " bytes, the header needs 16"),
                  std::string::npos)
            << m;
        EXPECT_NE(m.find(says), std::string::npos) << m;
    }
    for (std::size_t n = 16; n < blob.size(); ++n) {
        const std::string m = decode_descriptor(std::span(blob).first(n)).message();
        EXPECT_NE(m.find("truncated: " + std::to_string(n) + " of the " + total +
                         " bytes its length field (offset 8) announces"),
                  std::string::npos)
            << m;
    }
    auto flipped = blob;
    flipped[40] ^= std::byte{1};
    EXPECT_NE(decode_descriptor(flipped).message().find("the field at offset 12 says 0x"),
              std::string::npos);

    Notification n;
    n.kind = NotifyKind::Done;
    n.payload = "abcdef";
    const auto msg = encode_notification(n, 0, 7);
    for (std::size_t k = 0; k < kNotifyHeaderBytes; ++k) {
        const std::string m = decode_notification(std::span(msg).first(k)).message();
        EXPECT_NE(m.find("notification: truncated: " + std::to_string(k) +
                         " bytes, the header needs 40 (cut in '"),
                  std::string::npos)
            << m;
    }
    EXPECT_NE(decode_notification(std::span(msg).first(20))
                  .message()
                  .find("cut in 'expected' at offset 20"),
              std::string::npos);
    for (std::size_t k = kNotifyHeaderBytes; k < msg.size(); ++k) {
        const std::string m = decode_notification(std::span(msg).first(k)).message();
        EXPECT_NE(m.find("truncated: payload at offset 40 needs 6 bytes (payload length, offset "
                         "28), " +
                         std::to_string(k - kNotifyHeaderBytes) + " left"),
                  std::string::npos)
            << m;
    }
    auto longer = msg;
    longer.push_back(std::byte{0});
    EXPECT_NE(decode_notification(longer).message().find("1 trailing bytes after the 6-byte"),
              std::string::npos);
    auto kind = msg;
    kind[6] = std::byte{42};
    EXPECT_NE(decode_notification(kind).message().find("unknown kind 42 at offset 6"),
              std::string::npos);
}

PlanSide side(std::uint64_t base, std::uint64_t bs, std::uint64_t stride, std::uint32_t count) {
    return PlanSide{Layout{0, 0, bs, stride, count}, base};
}

TEST(Plan, SortsBySourceAndMergesRunsContiguousOnBothSides) {
    auto l = side(0x1000, 16, 16, 100);
    auto r = side(0x100000, 16, 16, 100);
    std::vector<BlockId> src = {5, 3, 4, 0, 1, 2, 9, 3};
    std::vector<BlockId> dst = {15, 13, 14, 10, 11, 12, 1, 13};  // last pair duplicates 3->13
    auto p = make_plan(l, r, src, dst, true, {1 << 20, 1000});
    ASSERT_TRUE(p) << p.message();
    ASSERT_EQ(p->segments.size(), 2u);
    EXPECT_EQ(p->segments[0].local_addr, 0x1000u);
    EXPECT_EQ(p->segments[0].remote_addr, 0x100000u + 10 * 16);
    EXPECT_EQ(p->segments[0].bytes, 6u * 16);
    EXPECT_EQ(p->segments[1].local_addr, 0x1000u + 9 * 16);
    EXPECT_EQ(p->segments[1].remote_addr, 0x100000u + 16);
    EXPECT_EQ(p->bytes, 7u * 16);
}

TEST(Plan, DoesNotMergeWhenOnlyOneSideIsContiguous) {
    auto l = side(0, 16, 16, 100);
    auto r = side(0x100000, 16, 16, 100);
    std::vector<BlockId> src = {0, 1, 2};
    std::vector<BlockId> dst = {0, 2, 4};
    auto p = make_plan(l, r, src, dst, true, {1 << 20, 1000});
    ASSERT_TRUE(p);
    EXPECT_EQ(p->segments.size(), 3u);
    auto strided = side(0, 16, 32, 100);  // gaps between blocks: never merged
    std::vector<BlockId> seq = {0, 1, 2};
    p = make_plan(strided, r, seq, seq, true, {1 << 20, 1000});
    ASSERT_TRUE(p);
    EXPECT_EQ(p->segments.size(), 3u);
}

TEST(Plan, ReadsSortByRemoteSource) {
    auto l = side(0, 16, 16, 100);
    auto r = side(0x100000, 16, 16, 100);
    std::vector<BlockId> local = {7, 6, 5};
    std::vector<BlockId> remote = {2, 1, 0};
    auto p = make_plan(l, r, local, remote, false, {1 << 20, 1000});
    ASSERT_TRUE(p);
    // caller order was descending; sorted by source (remote 0,1,2 -> local 5,6,7) it is one run
    ASSERT_EQ(p->segments.size(), 1u);
    EXPECT_EQ(p->segments[0].remote_addr, 0x100000u);
    EXPECT_EQ(p->segments[0].local_addr, 5u * 16);
    EXPECT_EQ(p->segments[0].bytes, 48u);
    std::vector<BlockId> crossed = {5, 6, 7};  // remote 2,1,0 -> local 5,6,7: no run
    p = make_plan(l, r, crossed, remote, false, {1 << 20, 1000});
    ASSERT_TRUE(p);
    EXPECT_EQ(p->segments.size(), 3u);
    EXPECT_EQ(p->segments[0].local_addr, 7u * 16);
}

TEST(Plan, RefusesBadRequests) {
    auto l = side(0, 16, 16, 10);
    auto r = side(0, 16, 16, 10);
    std::vector<BlockId> none, one = {1}, two = {1, 2}, out = {10}, big(11, 0);
    EXPECT_NE(make_plan(l, r, none, none, true, {1 << 20, 100}).message().find("empty"),
              std::string::npos);
    EXPECT_NE(make_plan(l, r, one, two, true, {1 << 20, 100}).message().find("mismatched"),
              std::string::npos);
    EXPECT_NE(make_plan(l, r, out, one, true, {1 << 20, 100}).message().find("local block 10"),
              std::string::npos);
    EXPECT_NE(make_plan(l, r, one, out, true, {1 << 20, 100}).message().find("remote block 10"),
              std::string::npos);
    EXPECT_NE(make_plan(l, r, two, two, true, {16, 100}).message().find("oversize"),
              std::string::npos);
    EXPECT_NE(make_plan(l, r, big, big, true, {1 << 20, 10}).message().find("oversize"),
              std::string::npos);
    std::vector<BlockId> dup_dst = {1, 1};
    EXPECT_NE(make_plan(l, r, two, dup_dst, true, {1 << 20, 100}).message().find("twice"),
              std::string::npos);
    auto other = side(0, 32, 32, 10);
    EXPECT_NE(make_plan(l, other, one, one, true, {1 << 20, 100}).message().find("block size"),
              std::string::npos);
    EXPECT_EQ(make_plan(l, r, none, none, true, {1 << 20, 100}).status(), Status::Invalid);
}

TEST(LeaseTable, SweepExpiresEveryDueLeaseNotJustTheOldest) {
    LeaseTable t;
    auto now = Clock::now();
    std::vector<BlockId> a = {1, 2}, b = {3}, c = {2};
    t.lease(10, 0, 0, a, now + std::chrono::hours(1));  // oldest, long-lived
    t.lease(11, 0, 0, b, now + std::chrono::milliseconds(5));
    t.lease(12, 0, 0, c, now + std::chrono::milliseconds(5));
    EXPECT_TRUE(t.is_leased(0, 2));
    EXPECT_EQ(t.region_leases(0), 3u);
    auto expired = t.expire(now + std::chrono::milliseconds(10));
    EXPECT_EQ(expired, (std::vector<std::uint64_t>{11, 12}));
    EXPECT_TRUE(t.is_leased(0, 2));  // still held by lease 10
    EXPECT_FALSE(t.is_leased(0, 3));
    EXPECT_TRUE(t.renew(10, now));
    EXPECT_EQ(t.expire(now + std::chrono::milliseconds(1)), (std::vector<std::uint64_t>{10}));
    EXPECT_FALSE(t.is_leased(0, 2));
    EXPECT_EQ(t.region_leases(0), 0u);
    EXPECT_FALSE(t.release(10));
}

// Ticks converted with ns_per_tick() must agree with Clock over the same span (a busy span of
// >= 5 ms, bounded by 1 s), whether the clock uses the TSC or not.
TEST(LatencyClock, TicksConvertToClockNanoseconds) {
    LatencyClock lc;
    const auto c0 = Clock::now();
    const std::uint64_t t0 = lc.now();
    Clock::time_point c1 = c0;
    while (c1 - c0 < std::chrono::milliseconds(5) && c1 - c0 < std::chrono::seconds(1)) {
        c1 = Clock::now();
    }
    const std::uint64_t t1 = lc.now();
    const double clock_ns =
        double(std::chrono::duration_cast<std::chrono::nanoseconds>(c1 - c0).count());
    const double tick_ns = double(LatencyClock::between(t0, t1)) * lc.ns_per_tick();
    EXPECT_GT(tick_ns, clock_ns * 0.9) << "tsc " << lc.uses_tsc();
    EXPECT_LT(tick_ns, clock_ns * 1.1) << "tsc " << lc.uses_tsc();
    EXPECT_EQ(LatencyClock::between(t1, t0), 0u);  // never negative
    TickStat s;
    s.add(100);
    s.add(300);
    const LatencyStat l = s.to_ns(2.0);
    EXPECT_EQ(l.count, 2u);
    EXPECT_EQ(l.total_ns, 800u);
    EXPECT_EQ(l.max_ns, 600u);
}

TransferResult result_of(TransferHandle h) {
    TransferResult r;
    r.handle = h;
    r.transfer_id = h * 7;
    r.bytes = h * 4096;
    r.status = h % 3 == 0 ? Status::Expired : Status::Ok;
    if (r.status != Status::Ok) {
        r.message = "deadline passed for " + std::to_string(h);
    }
    return r;
}

void expect_kept(const History& hist, TransferHandle h) {
    const TransferResult* r = hist.find(h);
    ASSERT_NE(r, nullptr) << "handle " << h;
    EXPECT_EQ(r->handle, h);
    EXPECT_EQ(r->transfer_id, h * 7);
    EXPECT_EQ(r->bytes, h * 4096);
    EXPECT_EQ(r->message, result_of(h).message);
}

// The newest `capacity` results in completion order stay, whatever order the handles finish in.
TEST(History, KeepsTheNewestResultsInCompletionOrder) {
    History hist(4);
    const TransferHandle order[] = {3, 1, 2, 6, 4, 5};
    for (TransferHandle h : order) {
        hist.add(h, result_of(h));
    }
    EXPECT_EQ(hist.find(3), nullptr);  // finished first, pushed out
    EXPECT_EQ(hist.find(1), nullptr);
    for (TransferHandle h : {2u, 6u, 4u, 5u}) {
        expect_kept(hist, h);
    }
    EXPECT_EQ(hist.find(7), nullptr);  // never finished
    EXPECT_EQ(hist.find(kNoTransfer), nullptr);
    EXPECT_EQ(hist.size(), 4u);
}

// Handles that share an index slot (here capacity 2: 4 slots, so 1, 5, 9, ... collide) are all
// found while kept, and the overflow map never holds more than the kept results.
TEST(History, HandlesSharingAnIndexSlotAreAllFound) {
    History hist(2);
    hist.add(1, result_of(1));
    hist.add(5, result_of(5));
    expect_kept(hist, 1);
    expect_kept(hist, 5);
    hist.add(9, result_of(9));
    EXPECT_EQ(hist.find(1), nullptr);
    expect_kept(hist, 5);
    expect_kept(hist, 9);
    for (TransferHandle h = 13; h < 4000; h += 4) {
        hist.add(h, result_of(h));
        expect_kept(hist, h);
        expect_kept(hist, h - 4);
        EXPECT_EQ(hist.find(h - 8), nullptr);
        EXPECT_LE(hist.overflow_size(), 2u);
    }
}

// Against a plain model (a deque of the newest results), over random completion orders with
// stragglers that finish long after newer handles, capacities that grow the index, and many
// more results than the capacity.
TEST(History, MatchesAPlainModel) {
    std::mt19937_64 rng(2026);
    for (std::size_t capacity : {1u, 3u, 7u, 64u, 700u, 5000u}) {
        History hist(capacity);
        std::deque<TransferHandle> model;
        std::vector<TransferHandle> pending;
        TransferHandle next = 0;
        for (int step = 0; step < 20000; ++step) {
            // issue a few, then finish one of the pending ones (often not the oldest)
            for (int k = int(rng() % 3); k >= 0; --k) {
                pending.push_back(++next);
            }
            std::size_t pick = rng() % 8 == 0 ? 0 : rng() % pending.size();
            TransferHandle h = pending[pick];
            pending.erase(pending.begin() + std::ptrdiff_t(pick));
            hist.add(h, result_of(h));
            model.push_back(h);
            if (model.size() > capacity) {
                model.pop_front();
            }
            if (step % 97 == 0 || capacity <= 7) {
                std::map<TransferHandle, bool> in_model;
                for (TransferHandle m : model) {
                    in_model[m] = true;
                }
                // every kept handle, the newest 64 handles, and 64 random older ones
                std::vector<TransferHandle> probe(model.begin(), model.end());
                for (TransferHandle q = next > 64 ? next - 64 : 1; q <= next + 1; ++q) {
                    probe.push_back(q);
                }
                for (int k = 0; k < 64; ++k) {
                    probe.push_back(1 + rng() % next);
                }
                for (TransferHandle q : probe) {
                    const bool want = in_model.count(q) != 0;
                    ASSERT_EQ(hist.find(q) != nullptr, want)
                        << "capacity " << capacity << " step " << step << " handle " << q;
                    if (want) {
                        ASSERT_EQ(hist.find(q)->handle, q);
                    }
                }
                ASSERT_LE(hist.overflow_size(), model.size());
            }
        }
    }
}

// Which transports the UCX backend's message worker gets (docs/transfer.md, "Messages never use
// shared memory"): never shared memory, and something that can reach the data list's peers.
TEST(UcxMessages, SharedMemoryListsGetAMessageWorkerWithoutSharedMemory) {
    for (const char* tls :
         {"posix,self", "sysv", "sm", "tcp,posix", " posix , tcp", "", "all", "^ib"}) {
        EXPECT_TRUE(messages_may_use_shm(tls)) << tls;
    }
    for (const char* tls : {"tcp", "rc,ud", "tcp,self", "ugni_smsg", "rc_mlx5,cuda_copy"}) {
        EXPECT_FALSE(messages_may_use_shm(tls)) << tls;
    }
    using P = std::pair<std::string, std::string>;
    // Only shared memory, self or copy engines: its peers are on this host.
    EXPECT_EQ(message_transports("posix,self", ""), (P{"tcp", "lo"}));
    EXPECT_EQ(message_transports("sm,self,cuda_copy,cuda_ipc", "mlx5_0:1"), (P{"tcp", "lo"}));
    // The network transports of the list, trimmed, with its devices.
    EXPECT_EQ(message_transports("tcp,posix,self", "eth0"), (P{"tcp", "eth0"}));
    EXPECT_EQ(message_transports(" posix , tcp ", ""), (P{"tcp", ""}));
    EXPECT_EQ(message_transports("rc_x,sm,ud_v,dc_mlx5,self", "mlx5_0:1"),
              (P{"rc_x,ud_v,dc_mlx5", "mlx5_0:1"}));
    // UCX's own choice, or a deny list: shared memory denied as well.
    EXPECT_EQ(message_transports("", "lo"), (P{"^sm", "lo"}));
    EXPECT_EQ(message_transports("all", ""), (P{"^sm", ""}));
    EXPECT_EQ(message_transports("^ib", ""), (P{"^ib,sm", ""}));
}

// The backend address comes from a peer's descriptor: its framing is checked before use.
TEST(UcxMessages, FramedAddressesRoundTripAndBrokenFramingIsRefused) {
    const std::vector<std::byte> data = {std::byte{1}, std::byte{2}, std::byte{3}};
    const std::vector<std::byte> msgs = {std::byte{9}, std::byte{8}};
    std::span<const std::byte> d, m;
    auto two = frame_addresses(data, msgs);
    ASSERT_EQ(two.size(), 1u + 4 + 3 + 4 + 2);
    EXPECT_EQ(two[0], std::byte{2});
    EXPECT_EQ(two[1], std::byte{3});  // u32 little-endian length
    ASSERT_TRUE(unframe_addresses(two, d, m));
    EXPECT_TRUE(std::equal(d.begin(), d.end(), data.begin(), data.end()));
    EXPECT_TRUE(std::equal(m.begin(), m.end(), msgs.begin(), msgs.end()));
    auto one = frame_addresses(data, {});
    ASSERT_TRUE(unframe_addresses(one, d, m));
    EXPECT_EQ(d.size(), 3u);
    EXPECT_TRUE(m.empty());

    auto refused = [&](std::vector<std::byte> b) { return !unframe_addresses(b, d, m); };
    EXPECT_TRUE(refused({}));
    for (unsigned count : {0u, 3u, 255u}) {
        auto b = two;
        b[0] = std::byte(count);
        EXPECT_TRUE(refused(b)) << count;
    }
    for (std::size_t cut = 1; cut < two.size(); ++cut) {  // every truncation
        EXPECT_TRUE(refused(std::vector<std::byte>(two.begin(), two.begin() + cut))) << cut;
    }
    auto trailing = one;
    trailing.push_back(std::byte{0});
    EXPECT_TRUE(refused(trailing));
    auto overlong = one;
    overlong[4] = std::byte{0xff};  // length 0xff000003: past the end
    EXPECT_TRUE(refused(overlong));
    auto empty_address = one;
    empty_address[1] = std::byte{0};
    empty_address.resize(5);  // count 1, length 0
    EXPECT_TRUE(refused(empty_address));
}

}  // namespace
}  // namespace pdx::detail
