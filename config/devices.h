#pragma once

// What cartd and `cart model bench` know of a GPU from its name alone: the vendors' bf16 dense
// tensor-core peak, and from it a first guess at a device's training speed as a multiple of an
// RTX 3090 (the unit cartd's placement measures work in; docs/design.md "Placement"). Torch-free.

#include <optional>
#include <string>
#include <string_view>

namespace cart::model {

// bf16 dense tensor-core peak with fp32 accumulation (what autocast's matmuls run at), TFLOP/s,
// from the vendors' datasheets.
struct CardPeak {
  const char* name;
  double bf16_tflops;
};

// The card whose name `device_name` (the CUDA runtime's or NVML's) contains, the longest such
// name winning, so that "RTX 3090 Ti" is not taken for "RTX 3090". nullopt for an unknown card
// and for a CPU.
std::optional<CardPeak> PeakOf(std::string_view device_name);

// The RTX 3090's peak in the table: the yardstick of relative speeds.
inline constexpr double kRtx3090Tflops = 71.0;

// A device's training speed relative to an RTX 3090 guessed from its peak (peak / 71 TFLOP/s);
// nullopt when the card is not in the table. Real speeds differ (memory bandwidth, clocks): cartd
// replaces the guess with what the device's runs measure.
std::optional<double> PeakSpeedRelativeTo3090(std::string_view device_name);

}  // namespace cart::model
