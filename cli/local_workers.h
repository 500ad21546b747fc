#pragma once

// Which devices `cart up`'s local workers train on: one worker per usable NVIDIA GPU by default,
// CPU workers where there is none or when asked (`cart up --device`). Pure: `cart up` counts the
// cards (common/nvidia.h) and knows whether its cart-worker was built against a CUDA LibTorch.

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace cart::cli {

struct LocalWorkerPlan {
  std::vector<std::string> devices;  // one per worker: "cuda:0", "cuda:1", ... or "cpu"
  std::string note;                  // why these, for `cart up` to print; empty when asked for
};

// `device`: auto (one worker per usable GPU when cart-worker has CUDA, else `cpu_workers` on the
// CPU, saying why), cpu (`cpu_workers` CPU workers) or cuda (one per usable GPU; an error naming
// the cause when there is none or cart-worker has no CUDA). `cpu_workers` 0: no local worker at
// all, whatever the device (cartd alone). InvalidArgument for another device or a negative count.
absl::StatusOr<LocalWorkerPlan> PlanLocalWorkers(std::string_view device, int cpu_workers,
                                                 int usable_gpus, bool worker_has_cuda);

}  // namespace cart::cli
