#pragma once

// Which device cart-worker trains on and what it tells cartd about it. Three libraries each see
// the machine their own way: LibTorch (can it run CUDA at all? Debian's LibTorch cannot), the
// CUDA runtime (its numbering follows CUDA_VISIBLE_DEVICES) and NVML (the card's name and memory,
// numbered over every GPU of the machine). A choice is made only when they agree on one card.

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "worker/system_metrics.h"

namespace cart::worker {

struct DeviceChoice {
  DeviceDescription description;  // what cartd is told (kind, name, index = N of cuda:N, memory)
  std::string torch_device;       // "cpu" or "cuda:N", in LibTorch's (= CUDA's) numbering
  int nvml_index = -1;            // the same card in NVML's numbering, for its metrics; -1: none
  std::string note;               // a line for the log when the choice needs explaining
};

// What the machine offers. cart-worker fills it from the real libraries (ProbeMachine); tests
// give their own.
struct DeviceProbe {
  int64_t cuda_devices = 0;                                        // CUDA devices LibTorch can use
  std::function<std::optional<std::string>(int)> cuda_pci_bus_id;  // CUDA index -> PCI bus id
  bool nvml_available = false;
  int nvml_devices = 0;  // NVML's count (the whole machine)
  std::function<std::optional<int>(const std::string&)> nvml_index_of_bus;  // bus id -> index
  std::function<std::optional<DeviceDescription>(int)> nvml_device;         // index -> card
  std::function<DeviceDescription()> cpu;
};

// `spec` is auto, cpu, cuda or cuda:N.
//  - cpu: the CPU.
//  - auto: cuda:0 when LibTorch can use CUDA, else the CPU; when NVML sees GPUs that LibTorch
//    cannot use (a CPU-only LibTorch on a GPU box), the CPU with a note saying so.
//  - cuda:N: card N of the CUDA runtime, described by NVML after matching the two by PCI bus id
//    (CUDA_VISIBLE_DEVICES renumbers CUDA's devices, not NVML's).
// InvalidArgument for another spec; FailedPrecondition, naming the library that disagrees, when
// LibTorch has no CUDA device N, NVML is missing, or the card's bus id is unknown to either.
absl::StatusOr<DeviceChoice> ChooseDevice(std::string_view spec, const DeviceProbe& probe);

// The probe of this machine: LibTorch's CUDA count, the CUDA runtime's bus ids, `nvml`.
DeviceProbe ProbeMachine(SystemMetrics& nvml);

}  // namespace cart::worker
