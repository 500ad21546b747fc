#pragma once

// What cartd and `cart model bench` know of a GPU from its name alone: the vendors' bf16 dense
// tensor-core peak, and from it a first guess at a device's training speed as a multiple of an
// RTX 3090 (the unit cartd's placement measures work in; docs/design.md "Placement"). Torch-free.

#include <optional>
#include <string>
#include <string_view>

namespace cart::config {

// bf16 dense tensor-core peak with fp32 accumulation (what autocast's matmuls run at), TFLOP/s,
// from the vendors' datasheets.
struct CardPeak {
  const char* name;
  double bf16_tflops;
  double fp32_tflops;  // plain fp32 (no TF32: PyTorch's matmuls default to full fp32)
};

// The card whose name `device_name` (the CUDA runtime's or NVML's) contains, the longest such
// name winning, so that "RTX 3090 Ti" is not taken for "RTX 3090". nullopt for an unknown card
// and for a CPU.
std::optional<CardPeak> PeakOf(std::string_view device_name);

// A device name without its vendor and brand prefixes ("RTX 3090" for "NVIDIA GeForce RTX
// 3090"): a device class in a table cell or a report line.
std::string ShortDeviceName(std::string name);

// The RTX 3090's peak in the table: the yardstick of relative speeds.
inline constexpr double kRtx3090Tflops = 71.0;

// A device's training speed relative to an RTX 3090 guessed from its peak (peak / 71 TFLOP/s);
// nullopt when the card is not in the table. Real speeds differ (memory bandwidth, clocks): cartd
// replaces the guess with what the device's runs measure.
std::optional<double> PeakSpeedRelativeTo3090(std::string_view device_name);

// Model FLOPs utilisation: the model's training FLOPs per token (config::CountFlops) times the
// tokens per second reached, over the device's peak. 0 when either is unknown (<= 0).
inline double Mfu(double train_flops_per_token, double tokens_per_s, double peak_tflops) {
  if (!(train_flops_per_token > 0) || !(tokens_per_s > 0) || !(peak_tflops > 0)) return 0;
  return train_flops_per_token * tokens_per_s / (peak_tflops * 1e12);
}

}  // namespace cart::config
