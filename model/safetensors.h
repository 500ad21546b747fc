#pragma once

// Safetensors export and import (https://github.com/huggingface/safetensors format: an 8-byte
// little-endian header length, a JSON header mapping tensor names to dtype, shape and byte
// offsets, then the raw little-endian data). Names are docs/model.md §8's.

#include <torch/torch.h>

#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "model/language_model.h"

namespace cart::model {

struct SafetensorsFile {
  std::map<std::string, torch::Tensor> tensors;  // CPU tensors, F32 / BF16 / F16 / I64 …
  std::map<std::string, std::string> metadata;   // the "__metadata__" string map
};

// Writes `tensors` (any device; copied to CPU, made contiguous) atomically to `path`.
// InvalidArgument, writing nothing, for a name given twice or a dtype safetensors cannot name.
absl::Status WriteSafetensors(const std::string& path,
                              const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                              const std::map<std::string, std::string>& metadata);

// Reads and validates a safetensors file. InvalidArgument naming the file and the problem for a
// truncated file, a header that is not JSON, an unknown dtype, offsets out of bounds or
// overlapping, or a byte count that does not match the shape.
absl::StatusOr<SafetensorsFile> ReadSafetensors(const std::string& path);

// The dtype an export's weights are written in, from its name: fp32 or bf16. InvalidArgument
// naming the allowed values for anything else.
absl::StatusOr<torch::Dtype> ExportDtype(const std::string& name);

// Exports every parameter of `model` under its §8 name, cast to `dtype` (kFloat32 or kBFloat16),
// with the resolved model config as YAML in metadata["cart_config"].
absl::Status SaveModel(LanguageModel& model, const std::string& path, torch::Dtype dtype,
                       const std::map<std::string, std::string>& extra_metadata = {});

// Copies the tensors of `file` into `model`'s parameters. InvalidArgument listing missing or
// unexpected names and shape mismatches; the model is untouched unless everything matches.
absl::Status LoadModel(LanguageModel& model, const SafetensorsFile& file);

// The model config stored in a file written by SaveModel. NotFound when absent.
absl::StatusOr<config::ModelConfig> ConfigFromMetadata(const SafetensorsFile& file,
                                                       const std::string& path);

}  // namespace cart::model
