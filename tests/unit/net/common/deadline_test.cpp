// Deadline: expiry runs once after the deadline, a later deadline postpones it, an earlier one
// brings it forward, expires_never() and destruction stop it, cancel() leaves no work behind.
#include "net/common/deadline.hpp"

#include <gtest/gtest.h>

#include <optional>

namespace pdr {
namespace {

using namespace std::chrono_literals;

class DeadlineTest : public ::testing::Test {
protected:
    // Runs the io_context until `done` or a bound; true when `done` became true.
    bool run_until(const std::function<bool()>& done, Duration bound = Duration{3000}) {
        const auto stop = Clock::now() + bound;
        while (!done() && Clock::now() < stop) {
            ioc_.run_for(5ms);
            ioc_.restart();
        }
        return done();
    }
    net::io_context ioc_;
    int fired_ = 0;
    Clock::time_point fired_at_{};
};

TEST_F(DeadlineTest, ExpiresOnceAfterTheDeadline) {
    Deadline d(ioc_.get_executor(), [&] {
        ++fired_;
        fired_at_ = Clock::now();
    });
    const auto t0 = Clock::now();
    d.expires_after(Duration{50});
    EXPECT_FALSE(d.expired());
    ASSERT_TRUE(run_until([&] { return fired_ == 1; }));
    EXPECT_GE(fired_at_ - t0, Duration{50});
    EXPECT_TRUE(d.expired());
    ioc_.run_for(100ms);
    EXPECT_EQ(fired_, 1);
}

TEST_F(DeadlineTest, LaterDeadlinePostponesExpiry) {
    Deadline d(ioc_.get_executor(), [&] {
        ++fired_;
        fired_at_ = Clock::now();
    });
    const auto t0 = Clock::now();
    d.expires_after(Duration{40});
    ioc_.run_for(20ms);
    d.expires_after(Duration{150});  // the pending 40 ms wait must re-arm, not expire
    ASSERT_TRUE(run_until([&] { return fired_ == 1; }));
    EXPECT_GE(fired_at_ - t0, Duration{170});
}

TEST_F(DeadlineTest, EarlierDeadlineBringsExpiryForward) {
    Deadline d(ioc_.get_executor(), [&] {
        ++fired_;
        fired_at_ = Clock::now();
    });
    const auto t0 = Clock::now();
    d.expires_after(Duration{10000});
    d.expires_after(Duration{30});
    ASSERT_TRUE(run_until([&] { return fired_ == 1; }, Duration{2000}));
    EXPECT_LT(fired_at_ - t0, Duration{2000});
    ioc_.run_for(50ms);
    EXPECT_EQ(fired_, 1);
}

TEST_F(DeadlineTest, NeverAndDestructionStopExpiry) {
    {
        Deadline d(ioc_.get_executor(), [&] { ++fired_; });
        d.expires_after(Duration{20});
        d.expires_never();
        ioc_.run_for(80ms);
        ioc_.restart();
        EXPECT_EQ(fired_, 0);
        EXPECT_FALSE(d.expired());
        d.expires_after(Duration{20});  // armed again after being disarmed
        ASSERT_TRUE(run_until([&] { return fired_ == 1; }));
    }
    std::optional<Deadline> d;
    d.emplace(ioc_.get_executor(), [&] { ++fired_; });
    d->expires_after(Duration{20});
    d.reset();
    ioc_.run_for(80ms);
    EXPECT_EQ(fired_, 1);
}

TEST_F(DeadlineTest, CancelLeavesNothingPending) {
    Deadline d(ioc_.get_executor(), [&] { ++fired_; });
    d.expires_after(Duration{10000});
    ioc_.poll();
    EXPECT_FALSE(ioc_.stopped()) << "the armed wait should count as work";
    d.cancel();
    for (int i = 0; i < 100 && !ioc_.stopped(); ++i) {
        ioc_.poll();
    }
    EXPECT_TRUE(ioc_.stopped()) << "a cancelled deadline still holds the io_context";
    EXPECT_EQ(fired_, 0);
    EXPECT_FALSE(d.expired());
}

}  // namespace
}  // namespace pdr
