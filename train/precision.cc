#include "train/precision.h"

#include <ATen/autocast_mode.h>
#include <torch/torch.h>

#include "model/autocast.h"

namespace cart::train {

using model::AutocastDtype;
using model::AutocastEnabled;
using model::SetAutocastDtype;
using model::SetAutocastEnabled;

bool UsesMixedPrecision(config::DType dtype, c10::Device device) {
  switch (dtype) {
    case config::DType::kFloat32:
      return false;
    case config::DType::kBFloat16:
      return device.is_cuda() || device.is_cpu();
    case config::DType::kAuto:
      return device.is_cuda();
  }
  return false;
}

MixedPrecisionScope::MixedPrecisionScope(bool enable, c10::Device device)
    : enabled_(enable), type_(device.type()) {
  if (!enabled_) return;
  was_enabled_ = AutocastEnabled(type_);
  previous_dtype_ = AutocastDtype(type_);
  SetAutocastDtype(type_, c10::kBFloat16);
  SetAutocastEnabled(type_, true);
}

MixedPrecisionScope::~MixedPrecisionScope() {
  if (!enabled_) return;
  SetAutocastEnabled(type_, was_enabled_);
  SetAutocastDtype(type_, previous_dtype_);
  // The cache holds bf16 copies of the weights for this forward pass; the optimizer step that
  // follows makes them stale.
  if (!was_enabled_) at::autocast::clear_cache();
}

}  // namespace cart::train
