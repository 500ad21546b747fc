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

}  // namespace cart::train
