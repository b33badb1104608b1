#pragma once
// The KV handover of one request: from P's answer (a KV handle) until D's first byte. It keeps
// P's lease refreshed (a LeaseKeeper hold), says until when the handle is valid (so no decode
// attempt starts that could reach D after P freed the blocks), and at D's first byte stops the
// refreshes and records the handover gap. The decode leg and the relay take it as a nullable
// pointer: null when the decode body carries no KV handle.
#include "net/common/io.hpp"
#include "router/kv/lease_keeper.hpp"
#include "router/metrics/router_metrics.hpp"

namespace pdr::disagg {

// Told of the decode answer's first body byte (or of the whole answer) by the relay.
class FirstByteSink {
public:
    virtual ~FirstByteSink() = default;
    virtual void first_byte() = 0;  // idempotent
};

class KvHandover final : public FirstByteSink {
public:
    KvHandover(kv::LeaseKeeper::Hold hold, metrics::RouterMetrics& metrics, Duration lease)
        : hold_(std::move(hold)),
          metrics_(metrics),
          prefill_answered_(Clock::now()),
          lease_(lease) {}
    KvHandover(const KvHandover&) = delete;
    KvHandover& operator=(const KvHandover&) = delete;

    // Until when P holds the blocks: the last acknowledged refresh plus the lease, or (refreshes
    // off) P's answer plus the lease.
    Clock::time_point valid_until() const {
        return hold_.active() ? hold_.lease_until() : prefill_answered_ + lease_;
    }
    // D's first body byte arrived (or its whole answer): idempotent.
    void first_byte() override;
    // D's answer began (its first byte, or a whole answer, error or not); the flag lives as
    // long as the handover.
    const bool& began() const noexcept { return seen_; }

private:
    kv::LeaseKeeper::Hold hold_;
    metrics::RouterMetrics& metrics_;
    Clock::time_point prefill_answered_;
    Duration lease_;
    bool seen_ = false;
};

}  // namespace pdr::disagg
