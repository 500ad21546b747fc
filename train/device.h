#pragma once

// Where a run computes: the one place a device name from a flag or a worker becomes a
// torch::Device, the current device held for a run, and batches sent to it.

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/core/DeviceGuard.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "config/accounting.h"

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
//  - PeakDeviceMemory: since the process started or the last ResetPeakDeviceMemory, the most
//    bytes held by tensors at once (`allocated`: what EstimateTrainingBytes counts) and the most
//    the allocator held from the driver at once (`reserved`: tensors, the blocks cached between
//    them and their fragmentation; what must fit on the card).
//  - ResetPeakDeviceMemory: starts both counts afresh. The allocator is set up at a process's first
//    CUDA allocation and throws when asked before it; this makes one first.
//  - CudaDeviceName: the card's name as the CUDA runtime gives it ("NVIDIA GeForce RTX 3090").
//  - CudaDeviceMemoryBytes: the card's whole memory, as the CUDA runtime gives it.
struct PeakDeviceBytes {
  int64_t allocated = 0;
  int64_t reserved = 0;
};
std::optional<PeakDeviceBytes> PeakDeviceMemory(c10::Device device);
void ResetPeakDeviceMemory(c10::Device device);
std::optional<std::string> CudaDeviceName(c10::Device device);
std::optional<int64_t> CudaDeviceMemoryBytes(c10::Device device);

// The CPU's counterpart of PeakDeviceMemory's `allocated`: the bytes LibTorch's CPU allocator
// gives tensors allocated while this lives, on this thread and the threads it hands its state to
// (the autograd engine's), and the most of them at once. Read from LibTorch's memory-reporting
// hook (the one its profiler uses), so it counts tensors exactly, not the process's pages.
// Tensors allocated before it began are not counted, nor their frees. One at a time per thread;
// it replaces the profiler's state on this thread while it lives.
class CpuTensorMemory {
 public:
  CpuTensorMemory();
  ~CpuTensorMemory();
  CpuTensorMemory(const CpuTensorMemory&) = delete;
  CpuTensorMemory& operator=(const CpuTensorMemory&) = delete;
  int64_t live_bytes() const;
  int64_t peak_bytes() const;

  class Reporter;

 private:
  std::shared_ptr<Reporter> reporter_;
};

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
// The same, asking the driver (common/nvidia.h UsableGpuCount) for its cards only where the answer
// shows: a run on the CPU that was not asked for by name.
std::string DeviceLineFor(c10::Device device, bool mixed_precision, std::string_view asked);

// Whether a run on `device` computes projections that read one input as one matmul
// (model/layers.h MergesProjections) unless told: on CUDA, where fewer and larger kernels pay;
// off on the CPU (measured by bench/merged_projections.sh; docs/gpu.md "Merged projections").
bool DefaultMergedProjections(c10::Device device);

// The kernels a training step on `device` runs in this build, as the memory estimate counts them
// (config::MemoryKernels): this LibTorch's major version, the device, the default projections.
// A worker tells cartd these so that its micro-batches are fitted to what it keeps.
config::MemoryKernels KernelsOn(c10::Device device);

// The fp32 matrix-multiply rate this process reaches on the CPU with its current thread setting
// (UseThreads), TFLOP/s: 1024 × 1024 products for about `seconds` after one to warm up. What a
// CPU worker divides by for its runs' MFU; a CPU has no datasheet peak to take.
double MeasureCpuMatmulTflops(double seconds = 0.5);

// Copies of device tensors into host memory that do not hold up training (a checkpoint's
// snapshot). From CUDA tensors, each copy goes into page-locked memory on a side stream, queued
// after what the current stream has queued so far, without waiting: Fence makes the current stream
// wait for the copies (call it before anything changes their sources: the next optimizer step),
// Wait blocks the calling thread until they are done (before the copies are read). From CPU
// tensors, and in a build without CUDA, Copy is a plain blocking copy and Fence and Wait return at
// once. One batch of copies at a time: Begin, Copy..., End.
class HostCopies {
 public:
  HostCopies();
  ~HostCopies();
  HostCopies(const HostCopies&) = delete;
  HostCopies& operator=(const HostCopies&) = delete;
  void Begin(c10::Device source);
  // Copies `from` into `to`, (re)allocating `to` on the host (page-locked when `from` is on CUDA)
  // when it is undefined or of another shape, dtype or kind of memory.
  void Copy(at::Tensor& to, const at::Tensor& from);
  void End();
  void Fence();
  void Wait();

 private:
  struct Cuda;
  std::unique_ptr<Cuda> cuda_;  // set by a Begin on a CUDA device
  bool on_cuda_ = false;
};

// `t` (a CPU tensor) on `device`. For a CUDA device it goes through page-locked memory and the copy
// is queued without waiting (the host prepares the next batch meanwhile; the copy and the kernels
// that read it run in order on the current stream). On the CPU, `t` itself, no copy.
at::Tensor ToDevice(const at::Tensor& t, c10::Device device);

}  // namespace cart::train
