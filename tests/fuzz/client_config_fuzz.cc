// Fuzz target: the client config file (~/.config/cart/client.yaml, `--client-config`).

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "rpc/client_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  (void)cart::rpc::ParseClientConfig(text, "client.yaml");
  return 0;
}
