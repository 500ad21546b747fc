#pragma once

// The optimizer half of a training step: the gradient norm with its clipping, and the AdamW
// update, each in two implementations that compute the same thing (docs/gpu.md, "The training
// step on a GPU"):
//  - kPerTensor: one small kernel per parameter and operation (LibTorch's own AdamW and the
//    operations of its clip_grad_norm_): ~950 launches a step at the paper's shape, which on a
//    large card leaves the GPU waiting for the host;
//  - kFused: LibTorch 2.4+'s multi-tensor kernels, one `_fused_adamw_` call per parameter group
//    and `_foreach_norm` / `_foreach_mul_` for the clipping: a handful of launches. They exist
//    for CPU and CUDA tensors alike (so the CPU tests compare them), not in LibTorch 1.13.
// Both keep the optimizer's state where torch::optim::AdamW keeps it (AdamWParamState: step,
// exp_avg, exp_avg_sq), so checkpoints are the same files whichever ran, and a run may resume
// under the other. They agree to float rounding, not to the bit (tests/train/optimizer_test.cc
// states the tolerance).

#include <ATen/core/Tensor.h>

#include <vector>

#include "absl/status/statusor.h"

namespace torch::optim {
class AdamW;
}

namespace cart::train {

enum class StepKernels { kPerTensor, kFused };

// True when this build's LibTorch has the fused kernels (2.4 or newer).
bool HasFusedStepKernels();
// kFused where the LibTorch has it, else kPerTensor: what training runs use.
StepKernels DefaultStepKernels();
const char* StepKernelsName(StepKernels kernels);  // "per-tensor" | "fused"

// The L2 norm of all gradients of `parameters` (those that have one), as a 0-dim tensor on their
// device, without reading it to the host. When max_norm > 0 the gradients are also scaled by
// min(1, max_norm / (norm + 1e-6)). kPerTensor does the same operations as LibTorch's
// clip_grad_norm_ (so the same bits), which however reads the norm to the host to return it.
// kFused is an error on a LibTorch without the kernels (HasFusedStepKernels).
at::Tensor ClipGradNorm(const std::vector<at::Tensor>& parameters, double max_norm,
                        StepKernels kernels = StepKernels::kPerTensor);

// One AdamW step of `optimizer` with each group's current options (lr, betas, eps, weight decay;
// amsgrad only per-tensor), over the parameters that have a gradient. kPerTensor is
// `optimizer.step()`.
void AdamWStep(torch::optim::AdamW& optimizer, StepKernels kernels);

// AdamW for a step that takes nothing from the host while it runs (a CUDA graph's step,
// train/cuda_graph.h): the learning rate and each parameter group's step count live on the
// device, and the step adds 1 to the count before it updates. Fused kernels only.
struct DeviceAdamW {
  at::Tensor lr;                  // 0-dim fp32, on the parameters' device; set before each step
  std::vector<at::Tensor> steps;  // per parameter group: 0-dim fp32, the steps done so far
};
// Makes every parameter's state where torch::optim::AdamW keeps it (zero moments at step 0 for
// one without) and the device tensors, each group's count from that state. InvalidArgument when a
// group's parameters are at different counts; FailedPrecondition without the fused kernels.
absl::StatusOr<DeviceAdamW> MakeDeviceAdamW(torch::optim::AdamW& optimizer);
// One fused AdamW step over every parameter of `optimizer` (each must have a gradient), with lr
// and counts from `device`. The host state's counts are left alone: CountHostSteps after the step
// has run keeps them (what checkpoints save) in step.
void AdamWStepOnDevice(torch::optim::AdamW& optimizer, DeviceAdamW& device);
void CountHostSteps(torch::optim::AdamW& optimizer);

}  // namespace cart::train
