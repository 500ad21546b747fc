#include "model/safetensors_header.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "common/strings.h"

namespace cart::model {
namespace {

constexpr size_t kMaxDims = 16;

absl::Status Bad(const std::string& source, const std::string& why) {
  return absl::InvalidArgumentError(StrCat(source, ": not a valid safetensors file: ", why));
}

// The integers of a JSON array, or false when it is not an array of integers that fit int64.
bool Int64s(const nlohmann::json& j, std::vector<int64_t>* out) {
  if (!j.is_array()) return false;
  for (const nlohmann::json& v : j) {
    if (v.is_number_unsigned()) {
      if (v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) return false;
    } else if (!v.is_number_integer()) {
      return false;
    }
    out->push_back(v.get<int64_t>());
  }
  return true;
}

}  // namespace

int64_t SafetensorsDtypeBytes(std::string_view dtype) {
  static const std::pair<std::string_view, int64_t> kSizes[] = {
      {"F32", 4}, {"BF16", 2}, {"F16", 2}, {"F64", 8}, {"I64", 8},
      {"I32", 4}, {"I16", 2},  {"I8", 1},  {"U8", 1},  {"BOOL", 1}};
  for (const auto& [name, bytes] : kSizes) {
    if (name == dtype) return bytes;
  }
  return 0;
}

absl::StatusOr<SafetensorsHeader> ParseSafetensorsHeader(std::string_view file,
                                                         const std::string& source) {
  if (file.size() < 8) return Bad(source, StrCat("file has ", file.size(), " bytes, < 8"));
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= uint64_t{static_cast<unsigned char>(file[i])} << (8 * i);
  if (n > file.size() - 8) {
    return Bad(source, StrCat("header length ", n, " exceeds the file (", file.size(), " bytes)"));
  }
  const nlohmann::json header =
      nlohmann::json::parse(file.substr(8, n), nullptr, /*allow_exceptions=*/false);
  if (header.is_discarded()) return Bad(source, "header is not JSON");
  if (!header.is_object()) return Bad(source, "header is not a JSON object");
  SafetensorsHeader out;
  out.data_offset = 8 + n;
  out.data_size = file.size() - 8 - n;
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const nlohmann::json& e = it.value();
    if (name == "__metadata__") {
      if (!e.is_object()) return Bad(source, "__metadata__ is not an object");
      for (auto m = e.begin(); m != e.end(); ++m) {
        if (!m.value().is_string()) {
          return Bad(source, StrCat("__metadata__.", m.key(), " is not a string"));
        }
        out.metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    if (!e.is_object()) return Bad(source, StrCat(name, ": not an object"));
    SafetensorsEntry entry;
    entry.name = name;
    auto dtype = e.find("dtype");
    if (dtype == e.end() || !dtype->is_string()) return Bad(source, StrCat(name, ": no dtype"));
    entry.dtype = dtype->get<std::string>();
    const int64_t element_bytes = SafetensorsDtypeBytes(entry.dtype);
    if (element_bytes == 0) {
      return Bad(source, StrCat(name, ": unknown dtype '", entry.dtype,
                                "' (known: F32, BF16, F16, F64, I64, I32, I16, I8, U8, BOOL)"));
    }
    auto shape = e.find("shape");
    if (shape == e.end() || !Int64s(*shape, &entry.shape) || entry.shape.size() > kMaxDims) {
      return Bad(source, StrCat(name, ": shape is not a list of at most ", kMaxDims, " integers"));
    }
    int64_t bytes = element_bytes;
    for (int64_t dim : entry.shape) {
      if (dim < 0) return Bad(source, StrCat(name, ": negative dimension"));
      if (__builtin_mul_overflow(bytes, dim, &bytes)) {
        return Bad(source, StrCat(name, ": shape too large"));
      }
    }
    std::vector<int64_t> offsets;
    auto found = e.find("data_offsets");
    if (found == e.end() || !Int64s(*found, &offsets) || offsets.size() != 2) {
      return Bad(source, StrCat(name, ": data_offsets is not a pair of integers"));
    }
    entry.begin = offsets[0];
    entry.end = offsets[1];
    if (entry.begin < 0 || entry.end < entry.begin ||
        static_cast<uint64_t>(entry.end) > out.data_size) {
      return Bad(source, StrCat(name, ": data_offsets outside the data section (", out.data_size,
                                " bytes)"));
    }
    if (entry.end - entry.begin != bytes) {
      return Bad(source,
                 StrCat(name, ": ", entry.end - entry.begin, " bytes for a shape needing ", bytes));
    }
    out.entries.push_back(std::move(entry));
  }
  std::vector<std::pair<int64_t, int64_t>> ranges;
  for (const SafetensorsEntry& e : out.entries) ranges.emplace_back(e.begin, e.end);
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i) {
    if (ranges[i].first < ranges[i - 1].second) return Bad(source, "tensor data ranges overlap");
  }
  return out;
}

}  // namespace cart::model
