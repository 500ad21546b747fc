#include "worker/energy_meter.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>

#include "common/strings.h"
#include "worker/system_metrics.h"

namespace cart::worker {
namespace {

// A whole non-negative number from the first line of `path`; nullopt (and `error`) otherwise.
std::optional<uint64_t> ReadCounterFile(const std::string& path, std::string* error) {
  std::ifstream in(path);
  if (!in) {
    if (error != nullptr) {
      *error = StrCat(path, ": ", std::strerror(errno),
                      errno == EACCES ? " (root only since Linux 5.10: an admin may grant read "
                                        "access, e.g. a udev rule or chmod o+r)"
                                      : "");
    }
    return std::nullopt;
  }
  std::string line;
  std::getline(in, line);
  std::optional<int64_t> v = ParseInt64(Trim(line));
  if (!v || *v < 0) {
    if (error != nullptr) *error = StrCat(path, ": '", line.substr(0, 40), "' is not a counter");
    return std::nullopt;
  }
  return static_cast<uint64_t>(*v);
}

}  // namespace

std::string PowercapDir() {
  const char* dir = std::getenv("CART_POWERCAP_DIR");
  return dir != nullptr && *dir != 0 ? dir : "/sys/class/powercap";
}

EnergyMeter::EnergyMeter(SystemMetrics* metrics, int gpu_index)
    : metrics_(metrics), gpu_index_(gpu_index) {
  absl::MutexLock lock(&mu_);
  if (gpu_index_ >= 0) {
    if (metrics_ == nullptr || !metrics_->nvml_available()) {
      why_not_ = "NVML is not loaded";
      return;
    }
    Counter c;
    std::optional<uint64_t> start = ReadRaw(c);
    if (!start) {
      why_not_ = StrCat("NVML has no energy counter for GPU ", gpu_index_,
                        " (nvmlDeviceGetTotalEnergyConsumption: Volta and later)");
      return;
    }
    c.last = *start;
    counters_.push_back(c);
    source_ = "nvml";
    return;
  }
  // The packages: intel-rapl:N (their subzones, intel-rapl:N:M, are parts of the package).
  namespace fs = std::filesystem;
  const std::string dir = PowercapDir();
  std::error_code ec;
  std::vector<std::string> zones;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (!std::regex_match(name, std::regex("intel-rapl:[0-9]+"))) continue;
    // A package's zone is named "package-N"; "psys" (the whole platform, on client parts) holds
    // the packages' energy too and would count it twice.
    std::ifstream zone_name(e.path() / "name");
    std::string kind;
    if (zone_name && std::getline(zone_name, kind) && kind.rfind("package-", 0) != 0) continue;
    zones.push_back(e.path().string());
  }
  std::sort(zones.begin(), zones.end());
  if (zones.empty()) {
    why_not_ = StrCat("no RAPL package under ", dir, " (the kernel exposes none on this machine)");
    return;
  }
  for (const std::string& zone : zones) {
    Counter c;
    c.path = zone + "/energy_uj";
    std::string error;
    std::optional<uint64_t> start = ReadCounterFile(c.path, &error);
    if (!start) {
      counters_.clear();
      why_not_ = error;
      return;
    }
    if (std::optional<uint64_t> max = ReadCounterFile(zone + "/max_energy_range_uj", nullptr)) {
      c.range = *max + 1;
    }
    c.last = *start;
    counters_.push_back(c);
  }
  source_ = "rapl";
}

std::optional<uint64_t> EnergyMeter::ReadRaw(const Counter& c) {
  if (c.path.empty()) return metrics_->GpuEnergyMillijoules(gpu_index_);
  return ReadCounterFile(c.path, nullptr);
}

std::optional<double> EnergyMeter::Joules() {
  absl::MutexLock lock(&mu_);
  if (counters_.empty()) return std::nullopt;
  double total = 0;
  for (Counter& c : counters_) {
    std::optional<uint64_t> now = ReadRaw(c);
    if (!now) return std::nullopt;
    uint64_t delta;
    if (*now >= c.last) {
      delta = *now - c.last;
    } else if (c.range > c.last) {
      delta = c.range - c.last + *now;  // wrapped once
    } else {
      delta = 0;  // a counter that went back without a known range: count nothing, not garbage
    }
    c.last = *now;
    c.joules +=
        c.path.empty() ? static_cast<double>(delta) / 1e3 : static_cast<double>(delta) / 1e6;
    total += c.joules;
  }
  return total;
}

}  // namespace cart::worker
