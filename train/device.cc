#include "train/device.h"

#include <ATen/ATen.h>
#include <dlfcn.h>
#include <torch/cuda.h>

#include <chrono>
#include <cstdlib>

#if CART_TORCH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDACachingAllocator.h>
#endif

#include "common/strings.h"

namespace cart::train {

int64_t CudaDeviceCount() {
  return torch::cuda::is_available() ? static_cast<int64_t>(torch::cuda::device_count()) : 0;
}

std::optional<std::string> CudaPciBusId(int index) {
  // Resolved at run time from the process: a CUDA LibTorch brings libcudart in, a CPU one does
  // not, and the project compiles no CUDA code of its own.
  using GetBusId = int (*)(char*, int, int);
  static const GetBusId get_bus_id =
      reinterpret_cast<GetBusId>(dlsym(RTLD_DEFAULT, "cudaDeviceGetPCIBusId"));
  if (get_bus_id == nullptr || index < 0 || index >= CudaDeviceCount()) return std::nullopt;
  char bus_id[32] = {0};
  if (get_bus_id(bus_id, sizeof bus_id, index) != 0) return std::nullopt;  // cudaSuccess == 0
  return std::string(bus_id);
}

absl::StatusOr<c10::Device> ResolveDevice(std::string_view spec) {
  const int64_t cuda_devices = CudaDeviceCount();
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

bool BuiltWithCuda() { return CART_TORCH_CUDA != 0; }

double MeasureCpuMatmulTflops(double seconds) {
  constexpr int64_t n = 1024;
  const at::Tensor a = at::rand({n, n}, at::kFloat);
  const at::Tensor b = at::rand({n, n}, at::kFloat);
  at::Tensor c = at::mm(a, b);  // warm-up: thread pool, caches
  int64_t products = 0;
  const auto start = std::chrono::steady_clock::now();
  double elapsed = 0;
  while (elapsed < seconds || products < 2) {
    c = at::mm(a, b);
    ++products;
    elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  return 2.0 * static_cast<double>(n * n * n) * static_cast<double>(products) / elapsed / 1e12;
}

std::optional<int64_t> PeakDeviceMemoryBytes(c10::Device device) {
#if CART_TORCH_CUDA
  if (device.is_cuda() && device.index() < CudaDeviceCount()) {
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device.index());
    // allocated_bytes[0]: the aggregate over the small and large pools.
    return static_cast<int64_t>(stats.allocated_bytes[0].peak);
  }
#endif
  return std::nullopt;
}

std::optional<int64_t> PeakDeviceReservedBytes(c10::Device device) {
#if CART_TORCH_CUDA
  if (device.is_cuda() && device.index() < CudaDeviceCount()) {
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device.index());
    return static_cast<int64_t>(stats.reserved_bytes[0].peak);
  }
#endif
  return std::nullopt;
}

void ResetPeakDeviceMemory(c10::Device device) {
#if CART_TORCH_CUDA
  if (device.is_cuda() && device.index() < CudaDeviceCount()) {
    // The caching allocator is set up lazily, at the first CUDA allocation; its statistics
    // cannot be reset before that ("did you call init?"), and `cart model bench` resets them
    // before its first step. One small allocation sets it up.
    (void)at::empty({1}, at::TensorOptions().device(device));
    c10::cuda::CUDACachingAllocator::resetPeakStats(device.index());
  }
#endif
}

std::optional<int64_t> CudaDeviceMemoryBytes(c10::Device device) {
#if CART_TORCH_CUDA
  if (device.is_cuda() && device.index() < CudaDeviceCount()) {
    return static_cast<int64_t>(at::cuda::getDeviceProperties(device.index())->totalGlobalMem);
  }
#endif
  return std::nullopt;
}

std::string ConfigureCudaAllocator() {
  const char* user = std::getenv("PYTORCH_CUDA_ALLOC_CONF");
  if (user == nullptr) user = std::getenv("PYTORCH_ALLOC_CONF");
  if (user != nullptr) return user;
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 1)
  setenv("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True", /*overwrite=*/0);
  return "expandable_segments:True";
#else
  return "";
#endif
}

std::string DeviceLine(c10::Device device, bool mixed_precision, std::string_view asked,
                       int driver_gpus) {
  const std::string precision = mixed_precision ? "bf16 autocast" : "fp32";
  if (device.is_cuda()) {
    return StrCat(device.str(), " (", CudaDeviceName(device).value_or("unnamed"), "), ", precision);
  }
  std::string line = StrCat(device.str(), ", ", precision);
  if (asked == "cpu") return line;
  if (driver_gpus > 0) {
    return StrCat(line, ", though the driver lists ", driver_gpus,
                  " NVIDIA GPU(s): WARNING, LibTorch sees no CUDA device (",
                  BuiltWithCuda() ? "a driver older than this LibTorch's CUDA needs, or "
                                    "CUDA_VISIBLE_DEVICES hides them"
                                  : "this build's LibTorch has no CUDA; build against a CUDA "
                                    "LibTorch 2.x, docs/gpu.md",
                  ")");
  }
  return StrCat(line, ", because there is no CUDA device");
}

std::optional<std::string> CudaDeviceName(c10::Device device) {
#if CART_TORCH_CUDA
  if (device.is_cuda() && device.index() < CudaDeviceCount()) {
    return std::string(at::cuda::getDeviceProperties(device.index())->name);
  }
#endif
  return std::nullopt;
}

at::Tensor ToDevice(const at::Tensor& t, c10::Device device) {
  if (t.device() == device) return t;
  if (device.is_cuda() && t.device().is_cpu()) {
    return t.pin_memory().to(device, /*non_blocking=*/true);
  }
  return t.to(device);
}

}  // namespace cart::train
