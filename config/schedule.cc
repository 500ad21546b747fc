#include "config/schedule.h"

#include <algorithm>
#include <cmath>

namespace cart::config {

double LearningRate(int64_t step, int64_t total_steps, int64_t warmup, double peak, double floor) {
  if (step < warmup) return peak * static_cast<double>(step + 1) / static_cast<double>(warmup);
  const int64_t decay_steps = total_steps - 1 - warmup;
  if (decay_steps <= 0) return floor;
  const double progress =
      std::clamp(static_cast<double>(step - warmup) / static_cast<double>(decay_steps), 0.0, 1.0);
  return floor + 0.5 * (peak - floor) * (1.0 + std::cos(M_PI * progress));
}

double ScheduledLr(const TrainConfig& train, int64_t step) {
  const int64_t horizon = train.lr_decay_steps > 0 ? train.lr_decay_steps : train.steps;
  return LearningRate(step, horizon, train.warmup, train.lr, train.lr_min);
}

}  // namespace cart::config
