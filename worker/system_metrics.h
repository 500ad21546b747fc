#pragma once

// What the worker reports about its machine next to the training metrics: process CPU and RAM
// from /proc, and on NVIDIA boxes GPU utilisation, memory, temperature and power through NVML,
// loaded with dlopen at run time so a box without the driver still runs. CART_NVML_LIBRARY names
// another library to load instead of libnvidia-ml.so.1 (a driver installed off the loader's path;
// the tests' fake NVML, tests/worker/fake_nvml.cc).

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
  std::string uuid;  // NVML's "GPU-..." for a GPU; empty for the CPU
  // A GPU's, from NVML when its library has them; empty otherwise.
  std::string driver_version;      // "550.54.14"
  std::string vbios;               // "94.02.42.00.A9"
  std::string compute_capability;  // "8.6"
  // The device name the worker registered under when it stands in for another card
  // (cart-worker --stand-in-for: tests of device classes); empty: its own name.
  std::string stands_in_for;
};

// One reading of the worker's device, running or idle (the fields of worker.proto DeviceSample).
struct DeviceReading {
  int64_t wall_time_us = 0;
  double utilization = 0;  // 0..1
  int64_t memory_used_mib = 0;
  int64_t memory_total_mib = 0;
  std::optional<double> temperature_c;
  std::optional<double> power_w;
  std::optional<int64_t> sm_clock_mhz;
  std::optional<int64_t> memory_clock_mhz;
  std::optional<uint64_t> throttle_reasons;
  double process_cpu_percent = 0;  // of one core
  int64_t process_rss_mib = 0;
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

  // The device as the worker's heartbeat reports it: GPU `gpu_index` through NVML when
  // `gpu_index` >= 0 and NVML loaded, else the CPU (this process's CPU time since the previous
  // call over `cpu_cores`, and its resident set of the RAM). Keeps its own CPU counter, apart
  // from Sample's.
  DeviceReading ReadDevice(int gpu_index, int cpu_cores);

  // GPU `gpu_index`'s total energy counter (NVML, millijoules since the driver loaded); nullopt
  // without NVML or on a card without the counter (before Volta).
  std::optional<uint64_t> GpuEnergyMillijoules(int gpu_index);
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
  // Process CPU ticks and wall time at the previous call, for the CPU share since then.
  struct CpuMeter {
    int64_t ticks = 0;
    int64_t wall_us = 0;
    std::optional<double> PercentOfOneCore();  // none at the first call
  };
  CpuMeter sample_cpu_;
  CpuMeter device_cpu_;
};

}  // namespace cart::worker
