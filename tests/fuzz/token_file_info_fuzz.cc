// Fuzz target: a token file's metadata (NAME.json beside NAME.bin, from `cart data prepare` or
// copied from another machine).

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "data/token_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  (void)cart::data::ParseTokenFileInfo(text, "fuzz.json");
  return 0;
}
