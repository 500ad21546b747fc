// Fuzz target: cartd's tokens file (`--tokens`), and a bearer header checked against it.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "server/auth.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<cart::server::TokenTable> table =
      cart::server::TokenTable::Parse(text, "tokens.txt");
  if (!table.ok()) return 0;
  // The input's last line doubles as an authorization header.
  const size_t cut = text.rfind('\n');
  const std::string_view header = cut == std::string_view::npos ? text : text.substr(cut + 1);
  (void)table->Check(header, cart::server::Api::kScheduler, "");
  return 0;
}
