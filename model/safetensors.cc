#include "model/safetensors.h"

#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "common/file.h"
#include "common/status.h"
#include "common/strings.h"
#include "model/safetensors_header.h"

namespace cart::model {
namespace {

struct DtypeName {
  torch::Dtype dtype;
  const char* name;
  int64_t bytes;
};
constexpr DtypeName kDtypes[] = {{torch::kFloat32, "F32", 4}, {torch::kBFloat16, "BF16", 2},
                                 {torch::kFloat16, "F16", 2}, {torch::kFloat64, "F64", 8},
                                 {torch::kInt64, "I64", 8},   {torch::kInt32, "I32", 4},
                                 {torch::kInt16, "I16", 2},   {torch::kInt8, "I8", 1},
                                 {torch::kUInt8, "U8", 1},    {torch::kBool, "BOOL", 1}};

const DtypeName* ByDtype(torch::Dtype d) {
  for (const auto& e : kDtypes) {
    if (e.dtype == d) return &e;
  }
  return nullptr;
}
const DtypeName* ByName(const std::string& n) {
  for (const auto& e : kDtypes) {
    if (n == e.name) return &e;
  }
  return nullptr;
}

}  // namespace

absl::Status WriteSafetensors(const std::string& path,
                              const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                              const std::map<std::string, std::string>& metadata) {
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  // Data in name order, so the same tensors always give the same bytes.
  std::vector<std::pair<std::string, torch::Tensor>> sorted = tensors;
  std::sort(sorted.begin(), sorted.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<torch::Tensor> data;
  int64_t offset = 0;
  for (size_t i = 0; i < sorted.size(); ++i) {
    const auto& [name, t] = sorted[i];
    if (i > 0 && sorted[i - 1].first == name) {
      return absl::InvalidArgumentError(StrCat(path, ": tensor name ", name, " given twice"));
    }
    torch::Tensor c = t.detach().to(torch::kCPU).contiguous();
    const DtypeName* dn = ByDtype(c.scalar_type());
    if (dn == nullptr) {
      return absl::InvalidArgumentError(
          StrCat(name, ": dtype ", c.scalar_type(), " has no safetensors name"));
    }
    const int64_t bytes = c.numel() * dn->bytes;
    header[name] = {{"dtype", dn->name},
                    {"shape", c.sizes().vec()},
                    {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
    data.push_back(c);
  }
  std::string text = header.dump();
  // Pad the header with spaces so the data starts 8-byte aligned (the format allows it).
  while ((text.size() + 8) % 8 != 0) text.push_back(' ');
  uint64_t n = text.size();
  unsigned char len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>((n >> (8 * i)) & 0xff);
  CART_ASSIGN_OR_RETURN(AtomicFileWriter out, AtomicFileWriter::Open(path));
  CART_RETURN_IF_ERROR(out.Write(len, 8));
  CART_RETURN_IF_ERROR(out.Write(text));
  for (const torch::Tensor& c : data) {
    CART_RETURN_IF_ERROR(out.Write(c.data_ptr(), c.numel() * c.element_size()));
  }
  return out.Commit();
}

absl::StatusOr<SafetensorsFile> ReadSafetensors(const std::string& path) {
  CART_ASSIGN_OR_RETURN(std::string bytes, ReadWholeFile(path));
  CART_ASSIGN_OR_RETURN(SafetensorsHeader header, ParseSafetensorsHeader(bytes, path));
  const char* base = bytes.data() + header.data_offset;
  SafetensorsFile file;
  file.metadata = std::move(header.metadata);
  for (const SafetensorsEntry& e : header.entries) {
    const DtypeName* dn = ByName(e.dtype);  // known: the header parser checked it
    torch::Tensor t = torch::empty(e.shape, torch::TensorOptions().dtype(dn->dtype));
    if (e.end > e.begin) std::memcpy(t.data_ptr(), base + e.begin, e.end - e.begin);
    file.tensors[e.name] = t;
  }
  return file;
}

absl::StatusOr<torch::Dtype> ExportDtype(const std::string& name) {
  if (name == "fp32") return torch::kFloat32;
  if (name == "bf16") return torch::kBFloat16;
  return absl::InvalidArgumentError(StrCat("--dtype '", name, "': allowed values are fp32, bf16"));
}

absl::Status SaveModel(LanguageModel& model, const std::string& path, torch::Dtype dtype,
                       const std::map<std::string, std::string>& extra_metadata) {
  if (dtype != torch::kFloat32 && dtype != torch::kBFloat16) {
    return absl::InvalidArgumentError("export dtype must be fp32 or bf16");
  }
  std::vector<std::pair<std::string, torch::Tensor>> tensors;
  for (const auto& p : model.named_parameters()) {
    tensors.emplace_back(p.key(), p.value().detach().to(dtype));
  }
  std::map<std::string, std::string> metadata = extra_metadata;
  config::RunConfig run;
  run.model = model.config();
  metadata["cart_config"] = config::ToYaml(run);
  metadata["format"] = "pt";
  return WriteSafetensors(path, tensors, metadata);
}

absl::Status LoadModel(LanguageModel& model, const SafetensorsFile& file) {
  std::vector<std::string> problems;
  auto params = model.named_parameters();
  for (const auto& p : params) {
    auto it = file.tensors.find(p.key());
    if (it == file.tensors.end()) {
      problems.push_back(StrCat("missing ", p.key()));
    } else if (it->second.sizes() != p.value().sizes()) {
      problems.push_back(StrCat(p.key(), " has shape ", it->second.sizes(), ", model expects ",
                                p.value().sizes()));
    }
  }
  for (const auto& [name, t] : file.tensors) {
    if (params.find(name) == nullptr) problems.push_back(StrCat("unexpected ", name));
  }
  if (!problems.empty()) {
    if (problems.size() > 8) {
      size_t more = problems.size() - 8;
      problems.resize(8);
      problems.push_back(StrCat("and ", more, " more"));
    }
    return absl::InvalidArgumentError(
        StrCat("checkpoint does not fit the model: ", StrJoin(problems, "; ")));
  }
  torch::NoGradGuard no_grad;
  for (auto& p : params) {
    torch::Tensor& dst = p.value();
    dst.copy_(file.tensors.at(p.key()).to(dst.device(), dst.scalar_type()));
  }
  return absl::OkStatus();
}

absl::StatusOr<config::ModelConfig> ConfigFromMetadata(const SafetensorsFile& file,
                                                       const std::string& path) {
  auto it = file.metadata.find("cart_config");
  if (it == file.metadata.end()) {
    return absl::NotFoundError(
        StrCat(path, ": has no cart_config metadata; pass the model config with --config"));
  }
  CART_ASSIGN_OR_RETURN(config::RunConfig run,
                        config::ParseRunConfigYaml(it->second, path + " (cart_config)"));
  return run.model;
}

}  // namespace cart::model
