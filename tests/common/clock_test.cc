#include "common/clock.h"

#include "gtest/gtest.h"

namespace cart {
namespace {

TEST(FakeClockTest, MovesOnlyWhenAdvancedOrSet) {
  FakeClock clock(absl::FromUnixSeconds(100));
  EXPECT_EQ(clock.Now(), absl::FromUnixSeconds(100));
  clock.Advance(absl::Seconds(30));
  EXPECT_EQ(clock.Now(), absl::FromUnixSeconds(130));
  clock.Set(absl::FromUnixSeconds(5));
  EXPECT_EQ(clock.Now(), absl::FromUnixSeconds(5));
}

TEST(RealClockTest, IsMonotoneEnoughAndNearNow) {
  absl::Time a = Clock::Real()->Now();
  absl::Time b = Clock::Real()->Now();
  EXPECT_LE(a, b);
  EXPECT_LT(absl::AbsDuration(absl::Now() - b), absl::Seconds(5));
}

}  // namespace
}  // namespace cart
