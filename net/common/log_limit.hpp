#pragma once
// Per-request warnings that anyone can cause (bad requests, failed admin keys) at most once per
// period per kind: the lines in between are counted, and the next line that goes out says how
// many were left out. Shared by the worker threads: allow() takes the limiter's own mutex.
#include "net/common/io.hpp"

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <string_view>

namespace pdr {

class LogLimiter {
public:
    explicit LogLimiter(Duration period = Duration{1000}) : period_(period) {}

    // True when a line of `kind` may go out now; then `note` is "" or " (N similar lines left
    // out)" to append to it. False: the line is counted and left out.
    bool allow(std::string_view kind, std::string& note) {
        const std::lock_guard<std::mutex> lock(mutex_);
        auto it = entries_.find(kind);
        if (it == entries_.end()) {
            if (entries_.size() >= kMaxKinds) {
                forget_idle(Clock::now());  // kinds come and go (instances)
            }
            it = entries_.emplace(std::string(kind), Entry{}).first;
        }
        Entry& e = it->second;
        const Clock::time_point now = Clock::now();
        if (e.last != Clock::time_point{} && now - e.last < period_) {
            ++e.dropped;
            return false;
        }
        note = e.dropped == 0 ? std::string{}
                              : " (" + std::to_string(e.dropped) + " similar lines left out)";
        e.last = now;
        e.dropped = 0;
        return true;
    }

private:
    static constexpr std::size_t kMaxKinds = 1024;
    // Drops the kinds with nothing left out and no line in the last period; all of them when
    // none is idle (their left-out counts are then lost).
    void forget_idle(Clock::time_point now) {
        std::erase_if(entries_, [&](const auto& kv) {
            return kv.second.dropped == 0 && now - kv.second.last >= period_;
        });
        if (entries_.size() >= kMaxKinds) {
            entries_.clear();
        }
    }
    struct Entry {
        Clock::time_point last{};
        std::uint64_t dropped = 0;
    };
    Duration period_;
    std::mutex mutex_;
    std::map<std::string, Entry, std::less<>> entries_;
};

}  // namespace pdr
