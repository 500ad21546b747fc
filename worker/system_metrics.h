#pragma once

// What the worker reports about its machine next to the training metrics: process CPU and RAM
// from /proc, and on NVIDIA boxes GPU utilisation, memory, temperature and power through NVML,
// loaded with dlopen at run time so a box without the driver still runs.

#include <cstdint>
#include <map>
#include <optional>
#include <string>

namespace cart::worker {

struct DeviceDescription {
  std::string kind;  // "cuda" or "cpu"
  std::string name;
  int index = 0;
  int64_t memory_mib = 0;
};

class SystemMetrics {
 public:
  SystemMetrics();
  ~SystemMetrics();
  SystemMetrics(const SystemMetrics&) = delete;
  SystemMetrics& operator=(const SystemMetrics&) = delete;

  // True when libnvidia-ml.so.1 loaded and initialised.
  bool nvml_available() const { return nvml_ != nullptr; }

  // "sys/cpu_percent" (of one core, since the previous call), "sys/rss_mib", and with NVML for
  // device `gpu_index`: "sys/gpu_util_percent", "sys/gpu_mem_used_mib", "sys/gpu_temp_c",
  // "sys/gpu_power_w".
  std::map<std::string, double> Sample(int gpu_index);

  // The GPU `index` through NVML, if any.
  std::optional<DeviceDescription> Gpu(int index);
  // GPUs NVML sees (all of the machine's: NVML ignores CUDA_VISIBLE_DEVICES); 0 without NVML.
  int GpuCount();
  // NVML's index of the GPU at PCI bus id `bus_id` ("0000:41:00.0"), if NVML knows it.
  std::optional<int> IndexOfPciBusId(const std::string& bus_id);
  // This machine's CPU (model name from /proc/cpuinfo) and RAM.
  static DeviceDescription Cpu();
  // Free space of the file system holding `path`, MiB.
  static int64_t FreeDiskMib(const std::string& path);

 private:
  struct Nvml;
  Nvml* nvml_ = nullptr;
  int64_t last_cpu_ticks_ = 0;
  int64_t last_wall_us_ = 0;
};

}  // namespace cart::worker
