#pragma once

// The defaults cartd's config (ServerConfig, server/server.h) and the Scheduler's options
// (SchedulerOptions, server/scheduler.h) share: one value each, so that `cartd --help`, a config
// file that leaves a key out and a Scheduler a test builds start from the same figure. (Checkpoint
// retention differs on purpose: cartd keeps 3 per run, a bare Scheduler every one.)

#include <cstdint>

#include "absl/time/time.h"

namespace cart::server::defaults {

inline constexpr absl::Duration kMaxAcquireWait = absl::Seconds(30);
inline constexpr int64_t kMaxRunsPerSweep = 100'000;
inline constexpr int64_t kMaxSweepBytes = int64_t{256} << 20;
inline constexpr int64_t kMaxUserPriority = 10;
inline constexpr absl::Duration kFairShareHalfLife = absl::Hours(24);
inline constexpr int64_t kMinFreeStoreBytes = int64_t{64} << 20;
inline constexpr bool kPreemption = false;
inline constexpr absl::Duration kPreemptInterval = absl::Hours(1);
inline constexpr bool kRaiseMicroBatch = true;

}  // namespace cart::server::defaults
