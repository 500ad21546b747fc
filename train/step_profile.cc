#include "train/step_profile.h"

#include <ATen/record_function.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <optional>
#include <set>
#include <stdexcept>
#include <string_view>
#include <vector>

#include "common/strings.h"
#include "model/layers.h"

#if CART_TORCH_CUDA && \
    (TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4))
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/csrc/autograd/profiler_kineto.h>
#define CART_GPU_PROFILER 1
#else
#define CART_GPU_PROFILER 0
#endif

namespace cart::train {
namespace {

using Clock = std::chrono::steady_clock;

// What the callbacks add up; one profiler at a time.
std::mutex g_mu;
StepBreakdown g_totals;
bool g_active = false;

// One open op of this thread: when it began, its callees' wall time, and the kind a scope around
// it (or the op itself, being one) charges it to. `generation`: the profiler it began under (an
// op open when one profiler ended is dropped by the next).
struct Open {
  Clock::time_point start;
  double callees = 0;
  std::optional<WorkKind> scope_kind;
  uint64_t generation = 0;
};
thread_local std::vector<Open> t_stack;
std::atomic<uint64_t> g_generation{0};

bool Contains(std::string_view s, std::string_view part) { return s.find(part) != s.npos; }

// An autograd node running the backward of an attention op (LibTorch names them
// "autograd::engine::evaluate_function: <Node>").
bool IsAttentionBackward(std::string_view name) {
  if (!Contains(name, "evaluate_function: ")) return false;
  for (std::string_view node :
       {"ScaledDotProduct", "Softmax", "Bmm", "MaskedFill", "Flash", "EfficientAttention"}) {
    if (Contains(name, node)) return true;
  }
  return false;
}

std::unique_ptr<at::ObserverContext> Enter(const at::RecordFunction& fn) {
  const uint64_t generation = g_generation.load();
  while (!t_stack.empty() && t_stack.back().generation != generation) t_stack.pop_back();
  const char* name = fn.name();
  std::optional<WorkKind> kind;
  if (!t_stack.empty()) kind = t_stack.back().scope_kind;
  if (std::strcmp(name, kOptimizerScope) == 0) {
    kind = WorkKind::kOptimizer;
  } else if (kind != WorkKind::kOptimizer &&
             (std::strcmp(name, model::kAttentionScope) == 0 || IsAttentionBackward(name))) {
    kind = WorkKind::kAttention;
  }
  t_stack.push_back({Clock::now(), 0, kind, generation});
  return nullptr;
}

void Leave(const at::RecordFunction& fn, at::ObserverContext*) {
  if (t_stack.empty() || t_stack.back().generation != g_generation.load()) return;
  const Open open = t_stack.back();
  t_stack.pop_back();
  const double wall = std::chrono::duration<double>(Clock::now() - open.start).count();
  if (!t_stack.empty()) t_stack.back().callees += wall;
  const WorkKind kind = open.scope_kind.value_or(KindOfOp(fn.name()));
  std::lock_guard<std::mutex> lock(g_mu);
  if (!g_active) return;
  g_totals.seconds[kind] += wall - open.callees;
  ++g_totals.ops;
}

}  // namespace

const char* WorkKindName(WorkKind kind) {
  switch (kind) {
    case WorkKind::kMatmul:
      return "matmul";
    case WorkKind::kAttention:
      return "attention";
    case WorkKind::kElementwise:
      return "elementwise";
    case WorkKind::kOptimizer:
      return "optimizer";
  }
  return "?";
}

double StepBreakdown::total_seconds() const {
  double sum = 0;
  for (const auto& [kind, s] : seconds) sum += s;
  return sum;
}

WorkKind KindOfOp(std::string_view op) {
  for (const char* mm : {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::matmul",
                         "aten::linear", "aten::addmv", "aten::mv"}) {
    if (op == mm) return WorkKind::kMatmul;
  }
  return WorkKind::kElementwise;
}

WorkKind KindOfKernel(std::string_view kernel) {
  // cuDNN's attention (one of scaled_dot_product_attention's backends on recent cards) names its
  // kernels "cudnn_..._sdpa_..."; the model has no other cuDNN work.
  for (std::string_view part : {"flash", "fmha", "attention", "Attention", "sdpa", "cudnn"}) {
    if (Contains(kernel, part)) return WorkKind::kAttention;
  }
  for (std::string_view part : {"multi_tensor_apply", "FusedAdam", "fused_adam", "_foreach"}) {
    if (Contains(kernel, part)) return WorkKind::kOptimizer;
  }
  for (std::string_view part : {"gemm", "gemv", "Gemm", "cutlass", "xmma", "nvjet", "cublas"}) {
    if (Contains(kernel, part)) return WorkKind::kMatmul;
  }
  return WorkKind::kElementwise;
}

#if CART_GPU_PROFILER

namespace {

void StartKineto() {
  namespace impl = torch::profiler::impl;
  const impl::ProfilerConfig config(impl::ProfilerState::KINETO);
  const std::set<impl::ActivityType> activities = {impl::ActivityType::CUDA};
  torch::autograd::profiler::prepareProfiler(config, activities);
  torch::autograd::profiler::enableProfiler(config, activities);
}

}  // namespace

absl::Status GpuStepProfiler::Available() {
  if (c10::cuda::device_count() == 0) {
    return absl::FailedPreconditionError("no CUDA device for LibTorch's Kineto profiler to time");
  }
  return absl::OkStatus();
}

GpuStepProfiler::GpuStepProfiler(c10::Device device) : device_(device) {
  if (!Available().ok() || !device.is_cuda()) {
    throw std::logic_error("GpuStepProfiler without a CUDA device");
  }
  StartKineto();
  running_ = true;
}

GpuStepProfiler::~GpuStepProfiler() {
  if (!running_) return;
  try {
    (void)torch::autograd::profiler::disableProfiler();
  } catch (const std::exception&) {  // a destructor does not throw
  }
}

StepBreakdown GpuStepProfiler::Take() {
  {  // the run's device: after the run another may be current (a context would open on it)
    const c10::cuda::CUDAGuard on_device(device_);
    c10::cuda::device_synchronize();
  }
  std::unique_ptr<torch::autograd::profiler::ProfilerResult> result =
      torch::autograd::profiler::disableProfiler();
  running_ = false;
  StepBreakdown out;
  for (const torch::autograd::profiler::KinetoEvent& e : result->events()) {
    if (e.deviceType() != c10::DeviceType::CUDA) continue;
    out.seconds[KindOfKernel(e.name())] += static_cast<double>(e.durationNs()) * 1e-9;
    ++out.ops;
  }
  StartKineto();
  running_ = true;
  return out;
}

#else  // no CUDA LibTorch 2.x: nothing to time kernels with

absl::Status GpuStepProfiler::Available() {
  return absl::FailedPreconditionError(StrCat(
      "timing GPU kernels needs a CUDA LibTorch 2.4+ (its Kineto profiler); this build's LibTorch ",
      TORCH_VERSION_MAJOR, ".", TORCH_VERSION_MINOR, CART_TORCH_CUDA ? "" : " has no CUDA"));
}
GpuStepProfiler::GpuStepProfiler(c10::Device device) : device_(device) {
  throw std::logic_error("GpuStepProfiler: no CUDA LibTorch 2.x in this build");
}
GpuStepProfiler::~GpuStepProfiler() = default;
StepBreakdown GpuStepProfiler::Take() { return {}; }

#endif

StepProfiler::StepProfiler() {
  {
    std::lock_guard<std::mutex> lock(g_mu);
    if (g_active) throw std::logic_error("StepProfiler: one at a time");
    g_active = true;
    g_totals = {};
  }
  ++g_generation;
  handle_ = at::addGlobalCallback(at::RecordFunctionCallback(&Enter, &Leave));
}

StepProfiler::~StepProfiler() {
  at::removeCallback(handle_);
  std::lock_guard<std::mutex> lock(g_mu);
  g_active = false;
}

StepBreakdown StepProfiler::Take() {
  std::lock_guard<std::mutex> lock(g_mu);
  StepBreakdown out = g_totals;
  g_totals = {};
  return out;
}

}  // namespace cart::train
