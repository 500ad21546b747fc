// Fuzz target: a sweep file as a stranger might submit it (cartd parses every submit itself).
// A file that parses is expanded too, with max_runs lowered so one input stays fast.

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "config/sweep.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<cart::config::SweepSpec> spec = cart::config::ParseSweepYaml(text, "fuzz.yaml");
  if (!spec.ok()) return 0;
  spec->max_runs = std::min<int64_t>(spec->max_runs, 200);
  (void)cart::config::ExpandSweep(*spec, "fuzz.yaml");
  return 0;
}
