#pragma once

// Where a run computes: the one place a device name from a flag or a worker becomes a
// torch::Device, the current device held for a run, and batches sent to it.

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/core/DeviceGuard.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace cart::train {

// CUDA devices this LibTorch can use: 0 for a CPU-only build (Debian's), without a driver, or
// with CUDA_VISIBLE_DEVICES empty.
int64_t CudaDeviceCount();

// The PCI bus id ("0000:41:00.0") of CUDA device `index` in the CUDA runtime's numbering (which
// CUDA_VISIBLE_DEVICES and CUDA_DEVICE_ORDER shape), from the CUDA runtime a CUDA LibTorch loads;
// nullopt with a CPU-only LibTorch or when the runtime cannot answer.
std::optional<std::string> CudaPciBusId(int index);

// "auto": cuda:0 when LibTorch sees a CUDA device, else cpu; "cpu"; "cuda" (= cuda:0); "cuda:N".
// InvalidArgument listing the allowed forms for anything else; FailedPrecondition naming how many
// CUDA devices LibTorch sees when a CUDA device is asked for and absent.
absl::StatusOr<c10::Device> ResolveDevice(std::string_view spec);

// Makes `device` the current CUDA device while it lives (nothing for the CPU). A run on cuda:N
// holds one from start to end, so that no kernel, allocation or context lands on GPU 0.
class RunOnDevice {
 public:
  explicit RunOnDevice(c10::Device device) {
    if (device.is_cuda()) guard_.reset_device(device);
  }

 private:
  c10::OptionalDeviceGuard guard_;
};

// What the CUDA caching allocator knows of device `device`, for benchmarks and reports. Both
// answer nullopt for the CPU and in a build against a LibTorch without CUDA (CART_TORCH_CUDA
// unset: Debian's), where there is no allocator to ask.
//  - PeakDeviceMemoryBytes: the most bytes held by tensors at once since the process started or
//    the last ResetPeakDeviceMemory (allocated, not reserved: what EstimateTrainingBytes counts).
//  - PeakDeviceReservedBytes: the most bytes the allocator held from the driver at once over the
//    same span (tensors, the blocks cached between them and their fragmentation): what must fit
//    on the card.
//  - ResetPeakDeviceMemory: starts both counts afresh. The allocator is set up at a process's first
//    CUDA allocation and throws when asked before it; this makes one first.
//  - CudaDeviceName: the card's name as the CUDA runtime gives it ("NVIDIA GeForce RTX 3090").
//  - CudaDeviceMemoryBytes: the card's whole memory, as the CUDA runtime gives it.
std::optional<int64_t> PeakDeviceMemoryBytes(c10::Device device);
std::optional<int64_t> PeakDeviceReservedBytes(c10::Device device);
void ResetPeakDeviceMemory(c10::Device device);
std::optional<std::string> CudaDeviceName(c10::Device device);
std::optional<int64_t> CudaDeviceMemoryBytes(c10::Device device);
// True when this build was compiled against a CUDA LibTorch (whether or not a card is present).
bool BuiltWithCuda();

// The CUDA caching allocator's settings for a process that trains or evaluates: expandable
// segments (LibTorch 2.1+), which grow a segment instead of opening another, so that blocks freed
// at one size serve the next and the gap between what the allocator reserves and what tensors
// hold stays small (a micro-batch fitted by the estimate then fits the card). It sets
// PYTORCH_CUDA_ALLOC_CONF unless the user set it or PYTORCH_ALLOC_CONF; LibTorch reads it at the
// first CUDA allocation, so main calls this first (cart-worker, cart-torch). Returns the setting
// in effect; "" when none (LibTorch 1.x, which does not know the option).
std::string ConfigureCudaAllocator();

// The device and precision a run trains with, in words, for the first line of its log:
// "cuda:0 (NVIDIA GeForce RTX 3090), bf16 autocast", or "cpu, fp32" with why when `asked` was
// not "cpu": no CUDA device, or (a warning) a driver listing `driver_gpus` cards that LibTorch
// does not see, with the likely cause.
std::string DeviceLine(c10::Device device, bool mixed_precision, std::string_view asked,
                       int driver_gpus);

// The fp32 matrix-multiply rate this process reaches on the CPU with its current thread setting
// (UseThreads), TFLOP/s: 1024 × 1024 products for about `seconds` after one to warm up. What a
// CPU worker divides by for its runs' MFU; a CPU has no datasheet peak to take.
double MeasureCpuMatmulTflops(double seconds = 0.5);

// `t` (a CPU tensor) on `device`. For a CUDA device it goes through page-locked memory and the copy
// is queued without waiting (the host prepares the next batch meanwhile; the copy and the kernels
// that read it run in order on the current stream). On the CPU, `t` itself, no copy.
at::Tensor ToDevice(const at::Tensor& t, c10::Device device);

}  // namespace cart::train
