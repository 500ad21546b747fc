// A stand-in for libnvidia-ml.so.1 with two cards, loaded by SystemMetrics through
// CART_NVML_LIBRARY (tests/worker/system_metrics_test.cc): the GPU fields of the device heartbeat
// are tested on a machine without a GPU. Each call reads FAKE_NVML_UTIL, FAKE_NVML_TEMP,
// FAKE_NVML_THROTTLE and FAKE_NVML_ENERGY_MJ from the environment, so a test can change the card's
// state between two readings. Only the entry points and struct layouts SystemMetrics uses, with C
// linkage as NVML's.
#include <cstdio>
#include <cstdlib>
#include <cstring>

extern "C" {

struct Utilization {
  unsigned int gpu, memory;
};
struct Memory {
  unsigned long long total, free, used;
};

static int cards[2] = {0, 1};
static long long EnvOr(const char* name, long long fallback) {
  const char* v = getenv(name);
  return v != nullptr && *v != 0 ? std::strtoll(v, nullptr, 0) : fallback;
}
static int Index(void* dev) { return static_cast<int>(static_cast<int*>(dev) - cards); }

int nvmlInit_v2(void) { return 0; }
int nvmlShutdown(void) { return 0; }
int nvmlDeviceGetCount_v2(unsigned int* count) {
  *count = 2;
  return 0;
}
int nvmlDeviceGetHandleByIndex_v2(unsigned int index, void** dev) {
  if (index > 1) return 2;  // NVML_ERROR_INVALID_ARGUMENT
  *dev = &cards[index];
  return 0;
}
int nvmlDeviceGetHandleByPciBusId_v2(const char* bus, void** dev) {
  if (std::strcmp(bus, "00000000:41:00.0") == 0) return nvmlDeviceGetHandleByIndex_v2(1, dev);
  if (std::strcmp(bus, "00000000:01:00.0") == 0) return nvmlDeviceGetHandleByIndex_v2(0, dev);
  return 6;  // NVML_ERROR_NOT_FOUND
}
int nvmlDeviceGetIndex(void* dev, unsigned int* index) {
  *index = static_cast<unsigned int>(Index(dev));
  return 0;
}
int nvmlDeviceGetName(void* dev, char* name, unsigned int length) {
  std::snprintf(name, length, "%s",
                Index(dev) == 0 ? "NVIDIA GeForce RTX 3050" : "NVIDIA GeForce RTX 3090");
  return 0;
}
int nvmlDeviceGetUUID(void* dev, char* uuid, unsigned int length) {
  std::snprintf(uuid, length, "GPU-fake0000-0000-0000-0000-00000000000%d", Index(dev));
  return 0;
}
int nvmlSystemGetDriverVersion(char* version, unsigned int length) {
  std::snprintf(version, length, "%s", "550.54.14");
  return 0;
}
int nvmlDeviceGetVbiosVersion(void* dev, char* version, unsigned int length) {
  std::snprintf(version, length, "%s", Index(dev) == 0 ? "94.07.1B.00.2F" : "94.02.42.00.A9");
  return 0;
}
int nvmlDeviceGetCudaComputeCapability(void* dev, int* major, int* minor) {
  (void)dev;
  *major = 8;
  *minor = 6;
  return 0;
}
int nvmlDeviceGetUtilizationRates(void* dev, Utilization* u) {
  (void)dev;
  u->gpu = static_cast<unsigned int>(EnvOr("FAKE_NVML_UTIL", 73));
  u->memory = 40;
  return 0;
}
int nvmlDeviceGetMemoryInfo(void* dev, Memory* m) {
  m->total = (Index(dev) == 0 ? 8ULL : 24ULL) << 30;
  m->used = 3ULL << 30;
  m->free = m->total - m->used;
  return 0;
}
int nvmlDeviceGetTemperature(void* dev, int sensor, unsigned int* celsius) {
  (void)dev;
  if (sensor != 0) return 2;
  *celsius = static_cast<unsigned int>(EnvOr("FAKE_NVML_TEMP", 64));
  return 0;
}
int nvmlDeviceGetPowerUsage(void* dev, unsigned int* milliwatts) {
  *milliwatts = Index(dev) == 0 ? 115500 : 342250;
  return 0;
}
// The energy counter: FAKE_NVML_ENERGY_MJ millijoules (card 0) or twice that (card 1); a test
// moves it between readings. "none": the card has no counter (NVML_ERROR_NOT_SUPPORTED).
int nvmlDeviceGetTotalEnergyConsumption(void* dev, unsigned long long* millijoules) {
  const char* v = getenv("FAKE_NVML_ENERGY_MJ");
  if (v != nullptr && std::strcmp(v, "none") == 0) return 3;
  *millijoules = static_cast<unsigned long long>(EnvOr("FAKE_NVML_ENERGY_MJ", 1000000)) *
                 (Index(dev) == 0 ? 1 : 2);
  return 0;
}
int nvmlDeviceGetClockInfo(void* dev, int type, unsigned int* mhz) {
  (void)dev;
  if (type == 1) {  // NVML_CLOCK_SM
    *mhz = 1695;
  } else if (type == 2) {  // NVML_CLOCK_MEM
    *mhz = 9751;
  } else {
    return 2;
  }
  return 0;
}
int nvmlDeviceGetCurrentClocksEventReasons(void* dev, unsigned long long* reasons) {
  (void)dev;
  *reasons = static_cast<unsigned long long>(EnvOr("FAKE_NVML_THROTTLE", 0));
  return 0;
}

}  // extern "C"
