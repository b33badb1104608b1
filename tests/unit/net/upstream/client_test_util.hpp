#pragma once
// Shared by the upstream client tests.
#include "net/upstream/client.hpp"

namespace pdr::upstream {

// Short timeouts for loopback tests: a failure shows within seconds, never hangs a test.
inline Timeouts quick() {
    Timeouts t;
    t.connect = Duration{1000};
    t.response = Duration{2000};
    t.idle = Duration{2000};
    return t;
}

}  // namespace pdr::upstream
