#include "train/schedule.h"

#include <cmath>

#include "gtest/gtest.h"

namespace cart::train {
namespace {

TEST(ScheduleTest, LinearWarmupThenCosineToTheFloorAtTheLastStep) {
  const double peak = 3e-4, floor = 3e-5;
  EXPECT_DOUBLE_EQ(LearningRate(0, 3000, 100, peak, floor), peak / 100);
  EXPECT_DOUBLE_EQ(LearningRate(49, 3000, 100, peak, floor), peak * 50 / 100);
  EXPECT_DOUBLE_EQ(LearningRate(99, 3000, 100, peak, floor), peak);
  EXPECT_DOUBLE_EQ(LearningRate(100, 3000, 100, peak, floor), peak);
  EXPECT_DOUBLE_EQ(LearningRate(2999, 3000, 100, peak, floor), floor);
  // Halfway through the decay the cosine is at the midpoint.
  EXPECT_NEAR(LearningRate(100 + 2899 / 2.0, 3000, 100, peak, floor), (peak + floor) / 2, 1e-7);
}

TEST(ScheduleTest, DecayIsMonotoneAndBounded) {
  double prev = 1;
  for (int64_t s = 10; s < 500; ++s) {
    const double lr = LearningRate(s, 500, 10, 1e-3, 1e-4);
    EXPECT_LE(lr, prev + 1e-18);
    EXPECT_GE(lr, 1e-4 - 1e-18);
    prev = lr;
  }
}

TEST(ScheduleTest, NoWarmupAndOneStepRuns) {
  EXPECT_DOUBLE_EQ(LearningRate(0, 100, 0, 1.0, 0.1), 1.0);
  EXPECT_DOUBLE_EQ(LearningRate(0, 1, 0, 1.0, 0.1), 0.1);
}

}  // namespace
}  // namespace cart::train
