#include "train/optimizer.h"

#include <torch/torch.h>

#include <map>
#include <memory>
#include <stdexcept>

#include "train/internal/optimizer_state.h"

// The fused AdamW kernel and the foreach kernels that take a tensor scale, on the CPU too.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
#define CART_FUSED_STEP_KERNELS 1
#else
#define CART_FUSED_STEP_KERNELS 0
#endif

namespace cart::train {

bool HasFusedStepKernels() { return CART_FUSED_STEP_KERNELS != 0; }

StepKernels DefaultStepKernels() {
  return HasFusedStepKernels() ? StepKernels::kFused : StepKernels::kPerTensor;
}

const char* StepKernelsName(StepKernels kernels) {
  return kernels == StepKernels::kFused ? "fused" : "per-tensor";
}

namespace {

void RequireFused() {
  if (!HasFusedStepKernels()) {
    throw std::invalid_argument(
        "the fused step kernels need LibTorch 2.4 or newer; this build's is older");
  }
}

torch::optim::AdamWParamState& StateOf(torch::optim::AdamW& optimizer, const at::Tensor& p) {
  std::unique_ptr<torch::optim::OptimizerParamState>& slot =
      optimizer.state()[internal::StateKey(p)];
  if (!slot) {  // as torch::optim::AdamW makes it at a parameter's first step
    auto state = std::make_unique<torch::optim::AdamWParamState>();
    state->step(0);
    state->exp_avg(torch::zeros_like(p, at::MemoryFormat::Preserve));
    state->exp_avg_sq(torch::zeros_like(p, at::MemoryFormat::Preserve));
    slot = std::move(state);
  }
  return static_cast<torch::optim::AdamWParamState&>(*slot);
}

}  // namespace

at::Tensor ClipGradNorm(const std::vector<at::Tensor>& parameters, double max_norm,
                        StepKernels kernels) {
  std::vector<at::Tensor> grads;
  for (const at::Tensor& p : parameters) {
    if (p.grad().defined()) grads.push_back(p.grad());
  }
  if (grads.empty()) return torch::zeros({});
  torch::NoGradGuard no_grad;
  std::vector<at::Tensor> norms;
  if (kernels == StepKernels::kFused) {
    RequireFused();
    norms = at::_foreach_norm(grads, 2);
  } else {
    norms.reserve(grads.size());
    for (const at::Tensor& g : grads) norms.push_back(g.norm(2));
  }
  at::Tensor total = norms.size() == 1 ? norms[0] : torch::stack(norms).norm(2);
  if (max_norm > 0) {
    at::Tensor coef = (max_norm / (total + 1e-6)).clamp_max(1.0);  // clamp(max = 1)
    if (kernels == StepKernels::kFused) {
#if CART_FUSED_STEP_KERNELS
      at::_foreach_mul_(grads, coef);
#endif
    } else {
      for (at::Tensor& g : grads) g.mul_(coef);
    }
  }
  return total;
}

void AdamWStep(torch::optim::AdamW& optimizer, StepKernels kernels) {
  if (kernels == StepKernels::kPerTensor) {
    optimizer.step();
    return;
  }
  RequireFused();
#if CART_FUSED_STEP_KERNELS
  torch::NoGradGuard no_grad;
  for (torch::optim::OptimizerParamGroup& group : optimizer.param_groups()) {
    const auto& o = static_cast<const torch::optim::AdamWOptions&>(group.options());
    if (o.amsgrad()) {
      throw std::invalid_argument("the fused AdamW step does not implement amsgrad");
    }
    // The parameters by their step count: the kernel takes the count as a tensor, one shared by
    // all that have the same (all of them, unless a parameter went without a gradient).
    struct Lists {
      std::vector<at::Tensor> params, grads, exp_avgs, exp_avg_sqs;
    };
    std::map<int64_t, Lists> by_step;
    for (const at::Tensor& p : group.params()) {
      if (!p.grad().defined()) continue;
      torch::optim::AdamWParamState& state = StateOf(optimizer, p);
      state.step(state.step() + 1);
      Lists& lists = by_step[state.step()];
      lists.params.push_back(p);
      lists.grads.push_back(p.grad());
      lists.exp_avgs.push_back(state.exp_avg());
      lists.exp_avg_sqs.push_back(state.exp_avg_sq());
    }
    for (auto& [step, lists] : by_step) {
      const at::Tensor count = torch::full({}, static_cast<double>(step),
                                           lists.params[0].options().dtype(torch::kFloat32));
      const std::vector<at::Tensor> steps(lists.params.size(), count);
      at::_fused_adamw_(lists.params, lists.grads, lists.exp_avgs, lists.exp_avg_sqs,
                        /*max_exp_avg_sqs=*/{}, steps, o.lr(), std::get<0>(o.betas()),
                        std::get<1>(o.betas()), o.weight_decay(), o.eps(), /*amsgrad=*/false,
                        /*maximize=*/false);
    }
  }
#endif
}

absl::StatusOr<DeviceAdamW> MakeDeviceAdamW(torch::optim::AdamW& optimizer) {
  if (!HasFusedStepKernels()) {
    return absl::FailedPreconditionError(
        "a step on the device's own counts needs the fused AdamW kernel (LibTorch 2.4 or newer)");
  }
  DeviceAdamW out;
  for (torch::optim::OptimizerParamGroup& group : optimizer.param_groups()) {
    if (group.params().empty()) {
      out.steps.emplace_back();
      continue;
    }
    const int64_t count = StateOf(optimizer, group.params()[0]).step();
    for (const at::Tensor& p : group.params()) {
      if (StateOf(optimizer, p).step() != count) {
        return absl::InvalidArgumentError(
            "AdamW's parameters are at different step counts; a device step needs one count per "
            "group");
      }
    }
    const at::Tensor& first = group.params()[0];
    out.steps.push_back(
        torch::full({}, static_cast<double>(count), first.options().dtype(torch::kFloat32)));
    if (!out.lr.defined()) out.lr = torch::zeros({}, first.options().dtype(torch::kFloat32));
  }
  return out;
}

void AdamWStepOnDevice(torch::optim::AdamW& optimizer, DeviceAdamW& device) {
  RequireFused();
#if CART_FUSED_STEP_KERNELS
  torch::NoGradGuard no_grad;
  size_t g = 0;
  for (torch::optim::OptimizerParamGroup& group : optimizer.param_groups()) {
    at::Tensor& count = device.steps.at(g++);
    if (group.params().empty()) continue;
    const auto& o = static_cast<const torch::optim::AdamWOptions&>(group.options());
    std::vector<at::Tensor> params, grads, exp_avgs, exp_avg_sqs;
    for (const at::Tensor& p : group.params()) {
      if (!p.grad().defined()) {
        throw std::invalid_argument("a device AdamW step needs every parameter's gradient");
      }
      torch::optim::AdamWParamState& state = StateOf(optimizer, p);
      params.push_back(p);
      grads.push_back(p.grad());
      exp_avgs.push_back(state.exp_avg());
      exp_avg_sqs.push_back(state.exp_avg_sq());
    }
    count.add_(1);
    const std::vector<at::Tensor> steps(params.size(), count);
    at::_fused_adamw_(params, grads, exp_avgs, exp_avg_sqs, /*max_exp_avg_sqs=*/{}, steps,
                      device.lr, std::get<0>(o.betas()), std::get<1>(o.betas()), o.weight_decay(),
                      o.eps(), /*amsgrad=*/false, /*maximize=*/false);
  }
#else
  (void)optimizer;
  (void)device;
#endif
}

void CountHostSteps(torch::optim::AdamW& optimizer) {
  for (torch::optim::OptimizerParamGroup& group : optimizer.param_groups()) {
    for (const at::Tensor& p : group.params()) {
      torch::optim::AdamWParamState& state = StateOf(optimizer, p);
      state.step(state.step() + 1);
    }
  }
}

}  // namespace cart::train
