// Fuzz target: a safetensors file's header (`cart model import`, checkpoints from elsewhere).
// Every entry that passes must lie inside the data section, so that copying it is safe.

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "model/safetensors_header.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view file(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<cart::model::SafetensorsHeader> header =
      cart::model::ParseSafetensorsHeader(file, "fuzz.safetensors");
  if (!header.ok()) return 0;
  for (const cart::model::SafetensorsEntry& e : header->entries) {
    if (e.begin < 0 || e.end < e.begin || header->data_offset + e.end > size) std::abort();
  }
  return 0;
}
