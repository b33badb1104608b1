// libFuzzer target for the two decoders that read bytes from another process: the descriptor
// blob (decode_descriptor) and the notification message (decode_notification). Each input is
// decoded as it is, and once more resealed (length and CRC32C rewritten) so that the fuzzer
// also reaches the field checks behind the checksum. A decoded descriptor must keep every
// layout inside its region and survive a re-encode unchanged.
// Build and run: scripts/fuzz-transfer (clang-14 + libfuzzer-14-dev), or the optional CMake
// target pdx_wire_fuzz when the compiler is clang. Seeds: tests/transfer/fuzz/corpus/.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <vector>

#include "wire.hpp"

namespace {

void check(const pdx::detail::Descriptor& d) {
    for (const auto& l : d.layouts) {
        if (l.region >= d.regions.size()) {
            std::abort();
        }
        const auto& r = d.regions[l.region];
        if (r.size != 0 && !pdx::detail::layout_fits(l, r.size)) {
            std::abort();
        }
    }
    auto again = pdx::detail::decode_descriptor(pdx::detail::encode_descriptor(d));
    if (!again || again->layouts.size() != d.layouts.size() ||
        again->regions.size() != d.regions.size() || again->name != d.name) {
        std::abort();
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const auto in = std::as_bytes(std::span(data, size));
    if (auto d = pdx::detail::decode_descriptor(in)) {
        check(*d);
    }
    if (size >= pdx::detail::kDescriptorHeaderBytes) {
        std::vector<std::byte> sealed(in.begin(), in.end());
        pdx::detail::reseal_descriptor(sealed);
        if (auto d = pdx::detail::decode_descriptor(sealed)) {
            check(*d);
        }
    }
    if (auto n = pdx::detail::decode_notification(in)) {
        if (n->notification.payload.size() != n->header.payload_bytes ||
            n->header.payload_bytes + pdx::detail::kNotifyHeaderBytes != size) {
            std::abort();
        }
    }
    return 0;
}
