#pragma once

// Mixed precision (docs/model.md §6): which runs use it, and the autocast scope around a forward
// pass. The optimizer's master weights, the loss, the backward's accumulation and the
// checkpoints stay fp32 either way, so a checkpoint loads the same into an fp32 or a bf16 run.

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <vector>

#include "config/config.h"

namespace cart::train {

// True when a run with `dtype` on `device` computes its forward pass under bf16 autocast: `bf16`
// on any device (the CPU too: LibTorch has CPU autocast), `auto` on CUDA only. `fp32`: never.
bool UsesMixedPrecision(config::DType dtype, c10::Device device);

// bf16 autocast on `device`'s type while it lives, when `enable`; restores the previous state
// (enabled flag and dtype) on exit. Not reentrant across threads: autocast state is thread-local.
class MixedPrecisionScope {
 public:
  MixedPrecisionScope(bool enable, c10::Device device);
  ~MixedPrecisionScope();
  MixedPrecisionScope(const MixedPrecisionScope&) = delete;
  MixedPrecisionScope& operator=(const MixedPrecisionScope&) = delete;

 private:
  bool enabled_;
  c10::DeviceType type_;
  bool was_enabled_ = false;
  c10::ScalarType previous_dtype_ = c10::ScalarType::Undefined;
};

}  // namespace cart::train
