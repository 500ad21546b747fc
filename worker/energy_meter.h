#pragma once

// The energy an attempt used (docs/operations.md "Energy"): read from the device's own counter at
// the attempt's start and at each reading since, never estimated.
//
//   a GPU   NVML's total energy counter of the card (nvmlDeviceGetTotalEnergyConsumption,
//           millijoules since the driver loaded; Volta and later): the card's energy, whatever
//           else runs on it;
//   a CPU   RAPL through the kernel's powercap files (/sys/class/powercap/intel-rapl:N/energy_uj,
//           one per package; the counter wraps at max_energy_range_uj, which is allowed for):
//           every package's energy, whatever else runs on the machine. CART_POWERCAP_DIR names
//           another directory to read (the tests' fake tree). Since Linux 5.10 the files are
//           readable by root only unless the admin grants it (the worker says so);
//   else    not measured: `Source()` says why, and no figure is made up.
//
// Thread-safe after construction.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"

namespace cart::worker {

class SystemMetrics;

class EnergyMeter {
 public:
  // A meter for GPU `gpu_index` (NVML through `metrics`, which must outlive it) or, when
  // gpu_index < 0, for the CPU packages. Takes the starting reading now.
  EnergyMeter(SystemMetrics* metrics, int gpu_index);

  // Joules since construction; nullopt when not measured.
  std::optional<double> Joules();
  // "nvml", "rapl", or empty when not measured.
  const std::string& source() const { return source_; }
  // Why it is not measured ("NVML has no energy counter for this card", "…/energy_uj: Permission
  // denied (root only since Linux 5.10)"); empty when it is.
  const std::string& why_not() const { return why_not_; }

 private:
  // One counter and what has been added up from it.
  struct Counter {
    std::string path;    // RAPL: the energy_uj file; empty: NVML
    uint64_t range = 0;  // RAPL: max_energy_range_uj + 1 (the wrap); 0: none
    uint64_t last = 0;   // the previous raw reading
    double joules = 0;   // added up since the start
  };
  std::optional<uint64_t> ReadRaw(const Counter& c);

  SystemMetrics* const metrics_;
  const int gpu_index_;
  std::string source_;
  std::string why_not_;
  absl::Mutex mu_;
  std::vector<Counter> counters_ ABSL_GUARDED_BY(mu_);
};

// The powercap directory RAPL is read from: CART_POWERCAP_DIR, else /sys/class/powercap.
std::string PowercapDir();

}  // namespace cart::worker
