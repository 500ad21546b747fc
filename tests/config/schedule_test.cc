#include "config/schedule.h"

#include <cmath>

#include "gtest/gtest.h"

namespace cart::config {
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

TEST(ScheduleTest, PastItsDecayHorizonTheRateHoldsAtTheFloor) {
  TrainConfig t;
  t.steps = 3000;
  t.warmup = 100;
  t.lr = 3e-4;
  t.lr_min = 3e-5;
  // As trained: the cosine over all 3,000 steps.
  for (int64_t s : {0, 99, 100, 1500, 2999}) {
    EXPECT_EQ(ScheduledLr(t, s), LearningRate(s, 3000, 100, 3e-4, 3e-5)) << s;
  }
  // Extended to 30,500 with the schedule held: the first 3,000 steps unchanged, then the floor.
  TrainConfig hold = t;
  hold.steps = 30500;
  hold.lr_decay_steps = 3000;
  for (int64_t s : {0, 1500, 2999}) EXPECT_EQ(ScheduledLr(hold, s), ScheduledLr(t, s)) << s;
  EXPECT_EQ(ScheduledLr(hold, 3000), 3e-5);
  EXPECT_EQ(ScheduledLr(hold, 30499), 3e-5);
  // Stretched: a warm restart, 3.0e-5 -> 2.9e-4 at step 3,000 (the example): the cosine
  // at 2,900 of its 30,399 decay steps.
  TrainConfig stretch = t;
  stretch.steps = 30500;
  const double restart = 3e-5 + 0.5 * 2.7e-4 * (1 + std::cos(M_PI * 2900.0 / 30399.0));
  EXPECT_NEAR(ScheduledLr(stretch, 3000), restart, 1e-15);
  EXPECT_NEAR(ScheduledLr(stretch, 3000), 2.94e-4, 0.005e-4);
}

}  // namespace
}  // namespace cart::config
