// The NVIDIA driver's cards, through NVML loaded at run time (common/nvidia.h).

#include "common/nvidia.h"

#include <dlfcn.h>

#include <cstdlib>
#include <string>

#include "common/strings.h"

namespace cart {

void* OpenNvml(std::string* named_error) {
  const char* named = std::getenv("CART_NVML_LIBRARY");
  const bool chosen = named != nullptr && *named != 0;
  void* nvml = dlopen(chosen ? named : "libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (nvml == nullptr && chosen && named_error != nullptr) *named_error = dlerror();
  return nvml;
}

int NvmlGpuCount() {
  void* nvml = OpenNvml();
  if (nvml == nullptr) return 0;
  using Init = int (*)();
  using Count = int (*)(unsigned int*);
  auto init = reinterpret_cast<Init>(dlsym(nvml, "nvmlInit_v2"));
  auto shutdown = reinterpret_cast<Init>(dlsym(nvml, "nvmlShutdown"));
  auto count = reinterpret_cast<Count>(dlsym(nvml, "nvmlDeviceGetCount_v2"));
  unsigned int cards = 0;
  if (init != nullptr && count != nullptr && init() == 0) {  // NVML_SUCCESS is 0
    if (count(&cards) != 0) cards = 0;
    if (shutdown != nullptr) shutdown();
  }
  dlclose(nvml);
  return static_cast<int>(cards);
}

int VisibleGpuCount(int listed, std::optional<std::string_view> visible) {
  if (!visible) return listed;
  int usable = 0;
  for (const std::string& entry : Split(*visible, ',')) {
    const std::string e(Trim(entry));
    const std::optional<int64_t> index = ParseInt64(e);
    const bool valid = index ? *index >= 0 && *index < listed : e.rfind("GPU-", 0) == 0;
    if (!valid) break;  // CUDA ignores this entry and every one after it
    ++usable;
  }
  return std::min(usable, listed);
}

int UsableGpuCount() {
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  return VisibleGpuCount(
      NvmlGpuCount(), visible == nullptr ? std::nullopt : std::optional<std::string_view>(visible));
}

}  // namespace cart
