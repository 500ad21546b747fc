// What the model benchmarks share: the performance issue's run (CART d 256, P 2, R 4, T 256,
// batch 8, vocab 4096), their --threads / --reps flags, thread pools and allocator set as
// training sets them, and the median of timed repetitions.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <vector>

#include "config/config.h"
#include "train/trainer.h"

namespace cart::bench {

inline constexpr int64_t kBatch = 8, kSeqLen = 256;

inline config::ModelConfig IssueRunModel() {
  config::ModelConfig config;
  config.vocab = 4096;
  config.d = 256;
  config.P = 2;
  config.R = 4;
  return config;
}

struct BenchFlags {
  int threads;
  int reps;
};

// Reads --threads N and --reps N over the defaults, then sets the thread pools (OpenBLAS and
// LibTorch) and the allocator as `cart train` does.
inline BenchFlags ParseFlagsAndSetUp(int argc, char** argv, BenchFlags flags) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (!std::strcmp(argv[i], "--threads")) flags.threads = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--reps")) flags.reps = std::atoi(argv[i + 1]);
  }
  train::UseThreads(flags.threads);
  train::RetainFreedMemory();
  return flags;
}

// Runs `f` once to warm up, then `reps` times; the median wall time in seconds.
inline double MedianSeconds(const std::function<void()>& f, int reps) {
  f();
  std::vector<double> times;
  for (int i = 0; i < reps; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    f();
    times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

}  // namespace cart::bench
