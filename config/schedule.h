#pragma once

// The learning-rate schedule of docs/model.md §6, as pure functions: the trainer's, and what
// cartd shows and checks when a run is extended (`cart runs extend --schedule`).

#include <cstdint>

#include "config/config.h"

namespace cart::config {

// Learning rate for optimizer step `step` (0-based) of a run of `total_steps` steps: linear
// warm-up from peak/warmup to `peak` over the first `warmup` steps, then a cosine from `peak`
// down to `floor`, reaching `floor` exactly at the last step (total_steps - 1).
double LearningRate(int64_t step, int64_t total_steps, int64_t warmup, double peak, double floor);

// The learning rate of step `step` (0-based) of a run with `train`: the cosine decays over
// lr_decay_steps (0: over all steps) and holds at lr_min past it (an extension with
// `--schedule hold`).
double ScheduledLr(const TrainConfig& train, int64_t step);

}  // namespace cart::config
