#pragma once

// Where a training step's time goes on the CPU, by kind of work: matrix products, attention,
// elementwise work (norms, activations, the loss, copies, everything else the step runs as a
// LibTorch op) and the optimizer (AdamW and the gradient clipping). `cart model bench
// --breakdown` prints it (docs/gpu.md "Where a step's time goes").
//
// It times every LibTorch op the process runs while a StepProfiler lives, through LibTorch's
// RecordFunction callbacks, and charges each op's own time (its wall time less that of the ops it
// called) to a kind:
//  - optimizer: anything run inside the trainer's "cart::optimizer" scope;
//  - attention: anything inside the model's "cart::attention" scope (the forward pass), or inside
//    the backward of an attention op (autograd's nodes for scaled_dot_product_attention, softmax,
//    batched matmul and masked fill: in LibTorch 1.13's written-out attention those are attention's
//    alone in this model);
//  - matmul: the matrix-product kernels (mm, addmm, bmm, matmul, linear) elsewhere;
//  - elementwise: every other op.
// The step's wall time less the ops' total is the time outside any op (the framework's dispatch
// between ops, the data loader, the host read at the end of the step).
//
// On the CPU an op's wall time is its computation. On a GPU it is the time to launch its kernels,
// not to run them: there GpuStepProfiler (below) takes the kernels' own times from LibTorch's
// Kineto profiler instead.

#include <c10/core/Device.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"

namespace cart::train {

// The trainer runs the clipping and the AdamW step in this scope; attention runs in
// model::kAttentionScope.
inline constexpr char kOptimizerScope[] = "cart::optimizer";

enum class WorkKind { kMatmul, kAttention, kElementwise, kOptimizer };
const char* WorkKindName(WorkKind kind);  // "matmul" | "attention" | "elementwise" | "optimizer"

struct StepBreakdown {
  std::map<WorkKind, double> seconds;  // own time of the ops of each kind
  int64_t ops = 0;                     // ops timed
  double total_seconds() const;
};

// Times the ops of every thread while it lives (one at a time in a process). Take() returns what
// was timed since construction or the last Take(), and starts afresh.
class StepProfiler {
 public:
  StepProfiler();
  ~StepProfiler();
  StepProfiler(const StepProfiler&) = delete;
  StepProfiler& operator=(const StepProfiler&) = delete;

  StepBreakdown Take();

 private:
  uint64_t handle_ = 0;
};

// The kind an op named `op` is charged to when nothing around it says otherwise (exposed for
// tests).
WorkKind KindOfOp(std::string_view op);

// Where a step's time goes on a GPU: the time the device spent in the kernels (and copies) of each
// kind, from LibTorch's Kineto profiler (CUPTI's kernel records), each kernel charged by its name
// (KindOfKernel). `ops` counts kernels. The step's wall time less their total is the time the
// device had nothing to run: launch overhead, host work, the read at the end of the step. Needs
// a CUDA LibTorch 2.4+ and a CUDA device; Available says why not otherwise.
class GpuStepProfiler {
 public:
  static absl::Status Available();
  // Starts recording the kernels of `device` (a CUDA device); throws std::logic_error when
  // !Available().
  explicit GpuStepProfiler(c10::Device device);
  ~GpuStepProfiler();
  GpuStepProfiler(const GpuStepProfiler&) = delete;
  GpuStepProfiler& operator=(const GpuStepProfiler&) = delete;

  // Waits for the device (its own, whichever device is current on the calling thread), then
  // returns what ran since construction or the last Take(), and starts afresh.
  StepBreakdown Take();

 private:
  c10::Device device_;
  bool running_ = false;
};

// The kind a GPU kernel named `kernel` is charged to, by its name: attention for the fused
// attention kernels (flash, memory-efficient / fmha), optimizer for the multi-tensor kernels
// (fused AdamW, foreach norms and scaling), matmul for the GEMM kernels (cuBLAS, cuBLASLt,
// CUTLASS), elementwise for the rest (norms, activations, the loss, copies).
WorkKind KindOfKernel(std::string_view kernel);

}  // namespace cart::train
