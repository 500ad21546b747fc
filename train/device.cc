#include "train/device.h"

#include <torch/cuda.h>

#include "common/strings.h"

namespace cart::train {

absl::StatusOr<c10::Device> ResolveDevice(std::string_view spec) {
  const int64_t cuda_devices = torch::cuda::is_available() ? torch::cuda::device_count() : 0;
  if (spec == "auto") return cuda_devices > 0 ? c10::Device(c10::kCUDA, 0) : c10::Device(c10::kCPU);
  if (spec == "cpu") return c10::Device(c10::kCPU);
  std::optional<int64_t> index;
  if (spec == "cuda") {
    index = 0;
  } else if (spec.rfind("cuda:", 0) == 0) {
    index = ParseInt64(spec.substr(5));
  }
  if (!index || *index < 0) {
    return absl::InvalidArgumentError(
        StrCat("device '", spec, "'; allowed: auto, cpu, cuda, cuda:N"));
  }
  if (*index >= cuda_devices) {
    return absl::FailedPreconditionError(
        StrCat("device ", spec, ": LibTorch sees ", cuda_devices, " CUDA device(s)",
               cuda_devices == 0 ? " (a CPU-only LibTorch, or no driver)" : ""));
  }
  return c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(*index));
}

}  // namespace cart::train
