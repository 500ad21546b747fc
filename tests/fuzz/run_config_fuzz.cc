// Fuzz target: a run config (`cart train CONFIG`, and each run of a sweep). A config that parses
// must survive the round trip through ToYaml unchanged: that text is what cartd stores and what
// workers read back.

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "common/strings.h"
#include "config/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<cart::config::RunConfig> config =
      cart::config::ParseRunConfigYaml(text, "fuzz.yaml");
  if (!config.ok()) return 0;
  const std::string yaml = cart::config::ToYaml(*config);
  absl::StatusOr<cart::config::RunConfig> again = cart::config::ParseRunConfigYaml(yaml, "stored");
  if (!again.ok()) {
    std::fprintf(stderr, "a parsed config does not read back: %s\n%s\n",
                 cart::Message(again.status()).c_str(), yaml.c_str());
    std::abort();
  }
  if (cart::config::ToYaml(*again) != yaml) {
    std::fprintf(stderr, "the round trip changed the config:\n%s\n---\n%s\n", yaml.c_str(),
                 cart::config::ToYaml(*again).c_str());
    std::abort();
  }
  return 0;
}
