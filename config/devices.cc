#include "config/devices.h"

#include <cstring>

namespace cart::config {
namespace {

// bf16 dense tensor-core and plain fp32 TFLOP/s, from the vendors' datasheets.
constexpr CardPeak kCardPeaks[] = {
    {"RTX 3050", 18.2, 9.1},     {"RTX 3060", 25.5, 12.7},   {"RTX 3070", 40.6, 20.3},
    {"RTX 3080 Ti", 68.2, 34.1}, {"RTX 3080", 59.5, 29.8},   {"RTX 3090 Ti", 80.0, 40.0},
    {"RTX 3090", 71.0, 35.6},    {"RTX 4090", 165.2, 82.6},  {"RTX A6000", 154.8, 38.7},
    {"A100", 312.0, 19.5},       {"H100 PCIe", 756.0, 51.2}, {"H100", 989.4, 66.9},
    {"H200", 989.4, 66.9},       {"L40S", 362.1, 91.6},      {"A10", 125.0, 31.2},
};

}  // namespace

std::optional<CardPeak> PeakOf(std::string_view device_name) {
  std::optional<CardPeak> best;
  for (const CardPeak& c : kCardPeaks) {
    if (device_name.find(c.name) == std::string_view::npos) continue;
    if (!best || std::strlen(c.name) > std::strlen(best->name)) best = c;
  }
  return best;
}

std::optional<double> PeakSpeedRelativeTo3090(std::string_view device_name) {
  const std::optional<CardPeak> card = PeakOf(device_name);
  if (!card) return std::nullopt;
  return card->bf16_tflops / kRtx3090Tflops;
}

std::string ShortDeviceName(std::string name) {
  for (std::string_view prefix : {"NVIDIA ", "GeForce "}) {
    if (name.rfind(prefix, 0) == 0) name = name.substr(prefix.size());
  }
  return name;
}

}  // namespace cart::config
