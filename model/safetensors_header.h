#pragma once

// The header of a safetensors file (an 8-byte little-endian length, a JSON object naming each
// tensor's dtype, shape and byte range, then the data), parsed and validated without LibTorch so
// that it can be fuzzed and reused. model/safetensors.h builds tensors from it.

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace cart::model {

struct SafetensorsEntry {
  std::string name;
  std::string dtype;  // "F32", "BF16", "F16", "F64", "I64", "I32", "I16", "I8", "U8", "BOOL"
  std::vector<int64_t> shape;
  int64_t begin = 0;  // byte range in the data section, [begin, end)
  int64_t end = 0;
};

struct SafetensorsHeader {
  std::vector<SafetensorsEntry> entries;        // in the header's key order
  std::map<std::string, std::string> metadata;  // the "__metadata__" string map
  uint64_t data_offset = 0;                     // where the data section starts in the file
  uint64_t data_size = 0;                       // bytes of the data section
};

// Bytes per element of a safetensors dtype name; 0 for an unknown name.
int64_t SafetensorsDtypeBytes(std::string_view dtype);

// Parses `file` (the whole file's bytes). InvalidArgument "<source>: not a valid safetensors
// file: <why>" for a truncated file, a header that is not a JSON object, an unknown dtype, a
// negative or overflowing shape, offsets out of bounds or overlapping, or a byte count that does
// not match the shape.
absl::StatusOr<SafetensorsHeader> ParseSafetensorsHeader(std::string_view file,
                                                         const std::string& source);

}  // namespace cart::model
