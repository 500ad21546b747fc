#include "worker/system_metrics.h"

#include <dlfcn.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "common/nvidia.h"
#include "common/strings.h"

namespace cart::worker {

// The few NVML entry points used, resolved by name (nvml.h is not needed to build).
struct SystemMetrics::Nvml {
  using Device = void*;
  struct Utilization {
    unsigned int gpu, memory;
  };
  struct Memory {
    unsigned long long total, free, used;
  };
  void* handle = nullptr;
  int (*shutdown)() = nullptr;
  int (*get_handle)(unsigned int, Device*) = nullptr;
  int (*get_name)(Device, char*, unsigned int) = nullptr;
  int (*get_util)(Device, Utilization*) = nullptr;
  int (*get_memory)(Device, Memory*) = nullptr;
  int (*get_temp)(Device, int, unsigned int*) = nullptr;
  int (*get_power)(Device, unsigned int*) = nullptr;
  // Optional (device lookup by bus id): null when the driver's NVML lacks them.
  int (*get_count)(unsigned int*) = nullptr;
  int (*get_handle_by_bus)(const char*, Device*) = nullptr;
  int (*get_index)(Device, unsigned int*) = nullptr;
  // Optional (the heartbeat's device series).
  int (*get_uuid)(Device, char*, unsigned int) = nullptr;
  int (*get_clock)(Device, int, unsigned int*) = nullptr;
  int (*get_throttle)(Device, unsigned long long*) = nullptr;
  // Optional (the attempt's environment record).
  int (*get_driver)(char*, unsigned int) = nullptr;
  int (*get_vbios)(Device, char*, unsigned int) = nullptr;
  int (*get_capability)(Device, int*, int*) = nullptr;
  // Optional (the attempt's energy, worker/energy_meter.h): millijoules since the driver loaded.
  int (*get_energy)(Device, unsigned long long*) = nullptr;
};

namespace {

template <typename F>
bool Resolve(void* handle, const char* name, F& out) {
  out = reinterpret_cast<F>(dlsym(handle, name));
  return out != nullptr;
}

int64_t NowMicros() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

int64_t ResidentMib() {
  std::ifstream statm("/proc/self/statm");
  long total = 0, resident = 0;
  statm >> total >> resident;
  return static_cast<int64_t>(resident) * sysconf(_SC_PAGESIZE) / (1 << 20);
}

int64_t ProcessCpuTicks() {
  std::ifstream in("/proc/self/stat");
  std::string line;
  std::getline(in, line);
  // Fields after the ")" of the command name: state is field 3; utime 14, stime 15.
  std::istringstream rest(line.substr(line.rfind(')') + 2));
  std::string field;
  int64_t utime = 0, stime = 0;
  for (int i = 3; i <= 15 && rest >> field; ++i) {
    if (i == 14) utime = std::stoll(field);
    if (i == 15) stime = std::stoll(field);
  }
  return utime + stime;
}

}  // namespace

SystemMetrics::SystemMetrics() {
  std::string named_error;
  void* handle = OpenNvml(&named_error);
  if (handle == nullptr) {
    // Without a driver there is no NVML, which is fine; a library the user named must load.
    if (!named_error.empty()) {
      std::fprintf(stderr, "cart-worker: CART_NVML_LIBRARY: %s\n", named_error.c_str());
    }
    return;
  }
  auto* n = new Nvml();
  n->handle = handle;
  int (*init)() = nullptr;
  const bool ok = Resolve(handle, "nvmlInit_v2", init) &&
                  Resolve(handle, "nvmlShutdown", n->shutdown) &&
                  Resolve(handle, "nvmlDeviceGetHandleByIndex_v2", n->get_handle) &&
                  Resolve(handle, "nvmlDeviceGetName", n->get_name) &&
                  Resolve(handle, "nvmlDeviceGetUtilizationRates", n->get_util) &&
                  Resolve(handle, "nvmlDeviceGetMemoryInfo", n->get_memory) &&
                  Resolve(handle, "nvmlDeviceGetTemperature", n->get_temp) &&
                  Resolve(handle, "nvmlDeviceGetPowerUsage", n->get_power) && init() == 0;
  if (!ok) {
    dlclose(handle);
    delete n;
    return;
  }
  Resolve(handle, "nvmlDeviceGetCount_v2", n->get_count);
  Resolve(handle, "nvmlDeviceGetHandleByPciBusId_v2", n->get_handle_by_bus);
  Resolve(handle, "nvmlDeviceGetIndex", n->get_index);
  Resolve(handle, "nvmlDeviceGetUUID", n->get_uuid);
  Resolve(handle, "nvmlDeviceGetClockInfo", n->get_clock);
  Resolve(handle, "nvmlSystemGetDriverVersion", n->get_driver);
  Resolve(handle, "nvmlDeviceGetVbiosVersion", n->get_vbios);
  Resolve(handle, "nvmlDeviceGetCudaComputeCapability", n->get_capability);
  Resolve(handle, "nvmlDeviceGetTotalEnergyConsumption", n->get_energy);
  // Renamed "clocks event reasons" in CUDA 12.2's NVML; the old name stays exported.
  if (!Resolve(handle, "nvmlDeviceGetCurrentClocksEventReasons", n->get_throttle)) {
    Resolve(handle, "nvmlDeviceGetCurrentClocksThrottleReasons", n->get_throttle);
  }
  nvml_ = n;
}

std::optional<uint64_t> SystemMetrics::GpuEnergyMillijoules(int gpu_index) {
  if (nvml_ == nullptr || nvml_->get_energy == nullptr || gpu_index < 0) return std::nullopt;
  Nvml::Device dev = nullptr;
  if (nvml_->get_handle(static_cast<unsigned int>(gpu_index), &dev) != 0) return std::nullopt;
  unsigned long long millijoules = 0;
  if (nvml_->get_energy(dev, &millijoules) != 0) return std::nullopt;
  return static_cast<uint64_t>(millijoules);
}

SystemMetrics::~SystemMetrics() {
  if (nvml_ != nullptr) {
    nvml_->shutdown();
    dlclose(nvml_->handle);
    delete nvml_;
  }
}

std::optional<double> SystemMetrics::CpuMeter::PercentOfOneCore() {
  const int64_t now_ticks = ProcessCpuTicks();
  const int64_t now = NowMicros();
  std::optional<double> percent;
  if (wall_us > 0 && now > wall_us) {
    const double cpu_seconds = static_cast<double>(now_ticks - ticks) / sysconf(_SC_CLK_TCK);
    percent = 100.0 * cpu_seconds / ((now - wall_us) / 1e6);
  }
  ticks = now_ticks;
  wall_us = now;
  return percent;
}

std::map<std::string, double> SystemMetrics::Sample(int gpu_index) {
  std::map<std::string, double> out;
  if (std::optional<double> cpu = sample_cpu_.PercentOfOneCore()) out["sys/cpu_percent"] = *cpu;
  out["sys/rss_mib"] = static_cast<double>(ResidentMib());
  if (nvml_ != nullptr) {
    Nvml::Device dev = nullptr;
    if (nvml_->get_handle(static_cast<unsigned>(gpu_index), &dev) == 0) {
      Nvml::Utilization util{};
      Nvml::Memory mem{};
      unsigned int temp = 0, power_mw = 0;
      if (nvml_->get_util(dev, &util) == 0) out["sys/gpu_util_percent"] = util.gpu;
      if (nvml_->get_memory(dev, &mem) == 0)
        out["sys/gpu_mem_used_mib"] = mem.used / double(1 << 20);
      if (nvml_->get_temp(dev, /*NVML_TEMPERATURE_GPU=*/0, &temp) == 0)
        out["sys/gpu_temp_c"] = temp;
      if (nvml_->get_power(dev, &power_mw) == 0) out["sys/gpu_power_w"] = power_mw / 1000.0;
    }
  }
  return out;
}

DeviceReading SystemMetrics::ReadDevice(int gpu_index, int cpu_cores) {
  DeviceReading r;
  r.wall_time_us = std::chrono::duration_cast<std::chrono::microseconds>(
                       std::chrono::system_clock::now().time_since_epoch())
                       .count();
  r.process_cpu_percent = device_cpu_.PercentOfOneCore().value_or(0.0);
  r.process_rss_mib = ResidentMib();
  Nvml::Device dev = nullptr;
  if (gpu_index < 0 || nvml_ == nullptr ||
      nvml_->get_handle(static_cast<unsigned>(gpu_index), &dev) != 0) {
    r.utilization = std::clamp(r.process_cpu_percent / 100.0 / std::max(1, cpu_cores), 0.0, 1.0);
    r.memory_used_mib = r.process_rss_mib;
    r.memory_total_mib = Cpu().memory_mib;
    return r;
  }
  Nvml::Utilization util{};
  Nvml::Memory mem{};
  if (nvml_->get_util(dev, &util) == 0) r.utilization = std::min(util.gpu, 100u) / 100.0;
  if (nvml_->get_memory(dev, &mem) == 0) {
    r.memory_used_mib = static_cast<int64_t>(mem.used >> 20);
    r.memory_total_mib = static_cast<int64_t>(mem.total >> 20);
  }
  unsigned int value = 0;
  if (nvml_->get_temp(dev, /*NVML_TEMPERATURE_GPU=*/0, &value) == 0) r.temperature_c = value;
  if (nvml_->get_power(dev, &value) == 0) r.power_w = value / 1000.0;
  if (nvml_->get_clock != nullptr) {
    if (nvml_->get_clock(dev, /*NVML_CLOCK_SM=*/1, &value) == 0) r.sm_clock_mhz = value;
    if (nvml_->get_clock(dev, /*NVML_CLOCK_MEM=*/2, &value) == 0) r.memory_clock_mhz = value;
  }
  unsigned long long reasons = 0;
  if (nvml_->get_throttle != nullptr && nvml_->get_throttle(dev, &reasons) == 0) {
    r.throttle_reasons = reasons;
  }
  return r;
}

std::optional<DeviceDescription> SystemMetrics::Gpu(int index) {
  if (nvml_ == nullptr) return std::nullopt;
  Nvml::Device dev = nullptr;
  if (nvml_->get_handle(static_cast<unsigned>(index), &dev) != 0) return std::nullopt;
  DeviceDescription d;
  d.kind = "cuda";
  d.index = index;
  char name[128] = {0};
  if (nvml_->get_name(dev, name, sizeof name) == 0) d.name = name;
  Nvml::Memory mem{};
  if (nvml_->get_memory(dev, &mem) == 0) d.memory_mib = static_cast<int64_t>(mem.total >> 20);
  char uuid[96] = {0};
  if (nvml_->get_uuid != nullptr && nvml_->get_uuid(dev, uuid, sizeof uuid) == 0) d.uuid = uuid;
  char driver[96] = {0};
  if (nvml_->get_driver != nullptr && nvml_->get_driver(driver, sizeof driver) == 0) {
    d.driver_version = driver;
  }
  char vbios[96] = {0};
  if (nvml_->get_vbios != nullptr && nvml_->get_vbios(dev, vbios, sizeof vbios) == 0) {
    d.vbios = vbios;
  }
  int major = 0;
  int minor = 0;
  if (nvml_->get_capability != nullptr && nvml_->get_capability(dev, &major, &minor) == 0) {
    d.compute_capability = StrCat(major, ".", minor);
  }
  return d;
}

int SystemMetrics::GpuCount() {
  unsigned int count = 0;
  if (nvml_ == nullptr || nvml_->get_count == nullptr || nvml_->get_count(&count) != 0) return 0;
  return static_cast<int>(count);
}

std::optional<int> SystemMetrics::IndexOfPciBusId(const std::string& bus_id) {
  if (nvml_ == nullptr || nvml_->get_handle_by_bus == nullptr || nvml_->get_index == nullptr) {
    return std::nullopt;
  }
  Nvml::Device dev = nullptr;
  unsigned int index = 0;
  if (nvml_->get_handle_by_bus(bus_id.c_str(), &dev) != 0) return std::nullopt;
  if (nvml_->get_index(dev, &index) != 0) return std::nullopt;
  return static_cast<int>(index);
}

DeviceDescription SystemMetrics::Cpu() {
  DeviceDescription d;
  d.kind = "cpu";
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line)) {
    if (line.rfind("model name", 0) == 0) {
      d.name = line.substr(line.find(':') + 2);
      break;
    }
  }
  if (d.name.empty()) d.name = "cpu";
  d.memory_mib = static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGESIZE) / (1 << 20);
  return d;
}

int64_t SystemMetrics::FreeDiskMib(const std::string& path) {
  struct statvfs s {};
  if (statvfs(path.c_str(), &s) != 0) return 0;
  return static_cast<int64_t>(s.f_bavail) * static_cast<int64_t>(s.f_frsize) / (1 << 20);
}

}  // namespace cart::worker
