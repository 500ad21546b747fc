#include "train/device.h"

#include <ATen/ATen.h>
#include <c10/core/Allocator.h>
#include <c10/util/ThreadLocalDebugInfo.h>
#include <dlfcn.h>
#include <torch/cuda.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <vector>

#if CART_TORCH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#endif

#include "common/nvidia.h"
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

// LibTorch's CPU allocator reports each allocation and free (a negative size) to the
// MemoryReportingInfoBase in the thread's PROFILER_STATE slot when it says memory profiling is on.
class CpuTensorMemory::Reporter : public c10::MemoryReportingInfoBase {
 public:
#if TORCH_VERSION_MAJOR >= 2
  using Total = size_t;  // the totals' type changed in LibTorch 2.0
#else
  using Total = int64_t;
#endif
  void reportMemoryUsage(void*, int64_t alloc_size, Total, Total, c10::Device device) override {
    if (!device.is_cpu()) return;
    const int64_t now = live_.fetch_add(alloc_size) + alloc_size;
    int64_t peak = peak_.load();
    while (now > peak && !peak_.compare_exchange_weak(peak, now)) {
    }
  }
  bool memoryProfilingEnabled() const override { return true; }
  std::atomic<int64_t> live_{0}, peak_{0};
};

namespace {
// The guard lives with the tracker: a DebugInfoGuard is neither copyable nor movable.
thread_local std::vector<std::unique_ptr<c10::DebugInfoGuard>> t_memory_guards;
}  // namespace

CpuTensorMemory::CpuTensorMemory() : reporter_(std::make_shared<Reporter>()) {
  t_memory_guards.push_back(
      std::make_unique<c10::DebugInfoGuard>(c10::DebugInfoKind::PROFILER_STATE, reporter_));
}

CpuTensorMemory::~CpuTensorMemory() {
  if (!t_memory_guards.empty()) t_memory_guards.pop_back();
}

int64_t CpuTensorMemory::live_bytes() const { return reporter_->live_.load(); }
int64_t CpuTensorMemory::peak_bytes() const { return reporter_->peak_.load(); }

// The side stream and the event its batch of copies ends with; the CUDA runtime's event API
// itself, which every LibTorch 2.x exposes the same way (its event class moved between releases).
struct HostCopies::Cuda {
#if CART_TORCH_CUDA
  explicit Cuda(c10::Device device)
      : device(device),
        side(c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device.index())) {
    const c10::cuda::CUDAGuard guard(device);
    C10_CUDA_CHECK(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
    C10_CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
  }
  ~Cuda() {  // events are destroyed from any device; nothing here may throw
    cudaEventDestroy(ready);
    cudaEventDestroy(done);
  }
  c10::Device device;
  c10::cuda::CUDAStream side;
  cudaEvent_t ready = nullptr, done = nullptr;
  bool fence_due = false, wait_due = false;
#endif
};

HostCopies::HostCopies() = default;
// A destructor must not throw (std::terminate): after a sticky CUDA error the wait fails as the
// trainer unwinds from that same error, which is the one to report.
HostCopies::~HostCopies() {
  try {
    Wait();
  } catch (...) {
  }
}

void HostCopies::Begin(c10::Device source) {
  on_cuda_ = false;
#if CART_TORCH_CUDA
  if (source.is_cuda()) {
    if (!cuda_ || cuda_->device != source) cuda_ = std::make_unique<Cuda>(source);
    // Each runtime call on the run's device: on a thread whose current device is another (the
    // checkpoint writer's is 0), a call would bind, even create, a context on that one.
    const c10::cuda::CUDAGuard on_device(source);
    // The side stream starts after everything the training stream has queued: the values copied
    // are the ones the step left.
    const c10::cuda::CUDAStream current = c10::cuda::getCurrentCUDAStream(source.index());
    C10_CUDA_CHECK(cudaEventRecord(cuda_->ready, current.stream()));
    C10_CUDA_CHECK(cudaStreamWaitEvent(cuda_->side.stream(), cuda_->ready, 0));
    on_cuda_ = true;
  }
#else
  (void)source;
#endif
}

void HostCopies::Copy(at::Tensor& to, const at::Tensor& from) {
  if (!from.defined()) {
    to = at::Tensor();
    return;
  }
  const bool pinned = from.is_cuda();
  if (!to.defined() || to.sizes() != from.sizes() || to.scalar_type() != from.scalar_type() ||
      (pinned && !to.is_pinned())) {
    to = at::empty(from.sizes(),
                   from.options().device(c10::kCPU).pinned_memory(pinned).memory_format(
                       c10::MemoryFormat::Contiguous));
  }
#if CART_TORCH_CUDA
  if (on_cuda_ && pinned) {
    const c10::cuda::CUDAStreamGuard on_side(cuda_->side);
    to.copy_(from, /*non_blocking=*/true);
    // The source lives on the training stream's allocations; tell the caching allocator that the
    // side stream uses it, so that a free on the training stream waits for the copy.
    c10::cuda::CUDACachingAllocator::recordStream(from.storage().data_ptr(), cuda_->side);
    return;
  }
#endif
  to.copy_(from);
}

void HostCopies::End() {
#if CART_TORCH_CUDA
  if (on_cuda_) {
    const c10::cuda::CUDAGuard on_device(cuda_->device);
    C10_CUDA_CHECK(cudaEventRecord(cuda_->done, cuda_->side.stream()));
    cuda_->fence_due = cuda_->wait_due = true;
  }
#endif
  on_cuda_ = false;
}

void HostCopies::Fence() {
#if CART_TORCH_CUDA
  if (cuda_ && cuda_->fence_due) {
    const c10::cuda::CUDAGuard on_device(cuda_->device);
    const c10::cuda::CUDAStream current = c10::cuda::getCurrentCUDAStream(cuda_->device.index());
    C10_CUDA_CHECK(cudaStreamWaitEvent(current.stream(), cuda_->done, 0));
    cuda_->fence_due = false;
  }
#endif
}

void HostCopies::Wait() {
#if CART_TORCH_CUDA
  if (cuda_ && cuda_->wait_due) {
    // Called from the checkpoint writer's thread: its current device is not the run's.
    const c10::cuda::CUDAGuard on_device(cuda_->device);
    cuda_->wait_due = false;  // once: a failed wait is not retried by the destructor
    C10_CUDA_CHECK(cudaEventSynchronize(cuda_->done));
  }
#endif
}

bool BuiltWithCuda() { return CART_TORCH_CUDA != 0; }

bool DefaultMergedProjections(c10::Device device) { return device.is_cuda(); }

config::MemoryKernels KernelsOn(c10::Device device) {
  config::MemoryKernels k;
  k.libtorch_major = TORCH_VERSION_MAJOR;
  k.cuda = device.is_cuda();
  k.merged_projections = DefaultMergedProjections(device);
  return k;
}

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

std::optional<PeakDeviceBytes> PeakDeviceMemory(c10::Device device) {
#if CART_TORCH_CUDA
  if (device.is_cuda() && device.index() < CudaDeviceCount()) {
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device.index());
    // [0]: the aggregate over the small and large pools.
    return PeakDeviceBytes{static_cast<int64_t>(stats.allocated_bytes[0].peak),
                           static_cast<int64_t>(stats.reserved_bytes[0].peak)};
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

std::string DeviceLineFor(c10::Device device, bool mixed_precision, std::string_view asked) {
  const bool driver_matters = !device.is_cuda() && asked != "cpu";
  return DeviceLine(device, mixed_precision, asked, driver_matters ? UsableGpuCount() : 0);
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
