// Which devices `cart up`'s local workers train on (cli/local_workers.h).

#include "cli/local_workers.h"

#include "common/strings.h"

namespace cart::cli {

absl::StatusOr<LocalWorkerPlan> PlanLocalWorkers(std::string_view device, int cpu_workers,
                                                 int usable_gpus, bool worker_has_cuda) {
  if (device != "auto" && device != "cpu" && device != "cuda") {
    return absl::InvalidArgumentError(StrCat("--device: '", device, "'; allowed: auto, cpu, cuda"));
  }
  if (cpu_workers < 0) {
    return absl::InvalidArgumentError(StrCat("--workers: ", cpu_workers, "; at least 0"));
  }
  LocalWorkerPlan plan;
  if (cpu_workers == 0) return plan;  // cartd alone: its workers come from elsewhere
  const bool gpus = usable_gpus > 0 && worker_has_cuda;
  if (device == "cuda" && !gpus) {
    return absl::FailedPreconditionError(
        usable_gpus == 0
            ? std::string("--device cuda: the driver lists no usable NVIDIA GPU (NVML sees none, "
                          "or CUDA_VISIBLE_DEVICES hides them); --device cpu trains on the CPU")
            : StrCat("--device cuda: the driver lists ", usable_gpus,
                     " GPU(s), but cart-worker was built against a LibTorch without CUDA "
                     "(Debian's 1.13 is CPU-only): build against a CUDA LibTorch 2.x "
                     "(docs/gpu.md)"));
  }
  if (device != "cpu" && gpus) {
    for (int i = 0; i < usable_gpus; ++i) plan.devices.push_back(StrCat("cuda:", i));
    if (device == "auto") plan.note = StrCat("one worker per GPU (", usable_gpus, ")");
    return plan;
  }
  plan.devices.assign(static_cast<size_t>(cpu_workers), "cpu");
  if (device == "auto") {
    plan.note = usable_gpus > 0
                    ? StrCat("the driver lists ", usable_gpus,
                             " usable GPU(s), but cart-worker was built against a LibTorch "
                             "without CUDA: training on the CPU (build against a CUDA LibTorch "
                             "2.x for the GPUs: docs/gpu.md)")
                    : std::string("no usable NVIDIA GPU: CPU workers");
  }
  return plan;
}

}  // namespace cart::cli
