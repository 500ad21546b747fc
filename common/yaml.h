#pragma once

// Loading YAML that people write (sweep files, run configs, cartd's and the client's config
// files) with errors that name the file and line. On top of yaml-cpp's parser it refuses what
// yaml-cpp lets through silently: bytes that are not UTF-8, and a key given twice in one mapping
// (yaml-cpp keeps one of the two, so a typo'd second `R:` would quietly win or lose).

#include <yaml-cpp/yaml.h>

#include <string_view>

#include "absl/status/statusor.h"

namespace cart {

// InvalidArgument, each naming `source`:
//   "<source>:<line>: not UTF-8 (byte 0xNN at column <c>)",
//   "<source>:<line>: YAML syntax error: <what>",
//   "<source>:<line>: '<key>' is given twice in one mapping (first at line <n>)".
absl::StatusOr<YAML::Node> LoadYaml(std::string_view text, std::string_view source);

}  // namespace cart
