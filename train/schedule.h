#pragma once

// The learning-rate schedule of docs/model.md §6, as a pure function.

#include <cstdint>

namespace cart::train {

// Learning rate for optimizer step `step` (0-based) of a run of `total_steps` steps: linear
// warm-up from peak/warmup to `peak` over the first `warmup` steps, then a cosine from `peak`
// down to `floor`, reaching `floor` exactly at the last step (total_steps - 1).
double LearningRate(int64_t step, int64_t total_steps, int64_t warmup, double peak, double floor);

}  // namespace cart::train
