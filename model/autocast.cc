#include "model/autocast.h"

#include <ATen/autocast_mode.h>

namespace cart::model {

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

}  // namespace cart::model
