#include "train/precision.h"

#include <ATen/autocast_mode.h>
#include <torch/torch.h>

namespace cart::train {
namespace {

// The autocast API took a device type in LibTorch 2.4; before, CUDA and CPU had functions each.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
bool AutocastEnabled(c10::DeviceType t) { return at::autocast::is_autocast_enabled(t); }
void SetAutocastEnabled(c10::DeviceType t, bool on) { at::autocast::set_autocast_enabled(t, on); }
c10::ScalarType AutocastDtype(c10::DeviceType t) { return at::autocast::get_autocast_dtype(t); }
void SetAutocastDtype(c10::DeviceType t, c10::ScalarType d) {
  at::autocast::set_autocast_dtype(t, d);
}
#else
bool AutocastEnabled(c10::DeviceType t) {
  return t == c10::kCUDA ? at::autocast::is_enabled() : at::autocast::is_cpu_enabled();
}
void SetAutocastEnabled(c10::DeviceType t, bool on) {
  if (t == c10::kCUDA) {
    at::autocast::set_enabled(on);
  } else {
    at::autocast::set_cpu_enabled(on);
  }
}
c10::ScalarType AutocastDtype(c10::DeviceType t) {
  return t == c10::kCUDA ? at::autocast::get_autocast_gpu_dtype()
                         : at::autocast::get_autocast_cpu_dtype();
}
void SetAutocastDtype(c10::DeviceType t, c10::ScalarType d) {
  if (t == c10::kCUDA) {
    at::autocast::set_autocast_gpu_dtype(d);
  } else {
    at::autocast::set_autocast_cpu_dtype(d);
  }
}
#endif

}  // namespace

bool UsesMixedPrecision(model::DType dtype, c10::Device device) {
  switch (dtype) {
    case model::DType::kFloat32:
      return false;
    case model::DType::kBFloat16:
      return device.is_cuda() || device.is_cpu();
    case model::DType::kAuto:
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
