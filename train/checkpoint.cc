#include "train/checkpoint.h"

#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <unordered_map>

#include "common/crc32c.h"
#include "common/file.h"
#include "common/status.h"
#include "common/strings.h"
#include "train/internal/optimizer_state.h"
#include "train/torch_error.h"

namespace cart::train {
namespace {

namespace fs = std::filesystem;

constexpr size_t kStagingBytes = size_t{1} << 20;

// Extends a running checksum over `n` bytes: CRC-32C, or zlib's CRC-32 (older manifests).
uint32_t ExtendChecksum(bool crc32c, uint32_t crc, const void* data, size_t n) {
  if (crc32c) return Crc32c(crc, data, n);
  uLong z = crc;
  const auto* bytes = static_cast<const Bytef*>(data);
  for (size_t off = 0; off < n;) {  // zlib takes a uInt length
    const size_t chunk = std::min<size_t>(n - off, size_t{1} << 30);
    z = crc32(z, bytes + off, static_cast<uInt>(chunk));
    off += chunk;
  }
  return static_cast<uint32_t>(z);
}

uint32_t Checksum(bool crc32c, const std::string& bytes) {
  return ExtendChecksum(crc32c, 0, bytes.data(), bytes.size());
}

// The manifest's JSON: the checksum under its algorithm's name.
nlohmann::json ManifestJson(const CheckpointManifest& m, const std::string& file) {
  return {{"step", m.step},     {"bytes", m.bytes},        {m.crc32c ? "crc32c" : "crc32", m.crc32},
          {"cursor", m.cursor}, {"config", m.config_yaml}, {"file", file}};
}

std::string StepName(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step-%08lld", static_cast<long long>(step));
  return buf;
}

absl::StatusOr<CheckpointManifest> ReadManifest(const fs::path& json_path) {
  CART_ASSIGN_OR_RETURN(std::string text, ReadWholeFile(json_path.string()));
  try {
    nlohmann::json j = nlohmann::json::parse(text);
    CheckpointManifest m;
    m.step = j.at("step").get<int64_t>();
    m.bytes = j.at("bytes").get<int64_t>();
    m.crc32c = j.contains("crc32c");
    m.crc32 = j.at(m.crc32c ? "crc32c" : "crc32").get<uint32_t>();
    m.cursor = j.at("cursor").get<int64_t>();
    m.config_yaml = j.at("config").get<std::string>();
    m.path = (json_path.parent_path() / j.at("file").get<std::string>()).string();
    return m;
  } catch (const nlohmann::json::exception& e) {
    return absl::DataLossError(StrCat(json_path.string(), ": bad checkpoint manifest: ", e.what()));
  }
}

// Writes the checkpoint's archive through `sink` (LibTorch's serializer; the sink returns the
// bytes it took, fewer to stop). Throws what the serializer throws.
void SaveArchive(const CheckpointState& state, torch::nn::Module& model,
                 torch::optim::Optimizer& optimizer,
                 const std::function<size_t(const void*, size_t)>& sink) {
  torch::serialize::OutputArchive archive;
  torch::serialize::OutputArchive model_archive;
  model.save(model_archive);
  archive.write("model", model_archive);
  torch::serialize::OutputArchive optimizer_archive;
  optimizer.save(optimizer_archive);
  archive.write("optimizer", optimizer_archive);
  archive.write("step", torch::tensor(state.step, torch::kInt64));
  archive.write("cursor", torch::tensor(state.cursor, torch::kInt64));
  archive.write("rng_cpu", state.rng_cpu.defined()
                               ? state.rng_cpu
                               : at::detail::getDefaultCPUGenerator().get_state());
  archive.save_to(sink);
}

// After the .pt file is committed: its manifest (atomically, last), then retention.
absl::StatusOr<CheckpointManifest> FinishCheckpoint(const std::string& dir,
                                                    const CheckpointState& state, int64_t bytes,
                                                    uint32_t crc, int64_t keep,
                                                    const CheckpointWriteOptions& write) {
  const std::string name = StepName(state.step);
  CheckpointManifest m;
  m.step = state.step;
  m.bytes = bytes;
  m.crc32 = crc;
  m.crc32c = write.crc32c;
  m.cursor = state.cursor;
  m.config_yaml = state.config_yaml;
  m.path = (fs::path(dir) / (name + ".pt")).string();
  CART_ASSIGN_OR_RETURN(AtomicFileWriter manifest,
                        AtomicFileWriter::Open((fs::path(dir) / (name + ".json")).string()));
  CART_RETURN_IF_ERROR(manifest.Write(ManifestJson(m, name + ".pt").dump(2) + "\n"));
  CART_RETURN_IF_ERROR(write.durable ? manifest.Commit() : manifest.CommitWithoutSync());

  std::error_code ec;
  std::vector<CheckpointManifest> all = ListCheckpoints(dir);
  for (size_t i = 0; i + keep < all.size(); ++i) {
    fs::remove(fs::path(dir) / (StepName(all[i].step) + ".json"), ec);  // manifest first
    if (write.discard) {
      write.discard(all[i].path);
    } else {
      fs::remove(all[i].path, ec);
    }
  }
  return m;
}

}  // namespace

using internal::OptimizerStateKey;
using internal::StateKey;

CheckpointSnapshot::CheckpointSnapshot(std::shared_ptr<torch::nn::Module> copy)
    : model_(std::move(copy)) {}

absl::Status CheckpointSnapshot::Take(torch::nn::Module& model, torch::optim::AdamW& optimizer) {
  torch::NoGradGuard no_grad;
  const std::vector<torch::Tensor> from = model.parameters(), to = model_->parameters();
  const std::vector<torch::Tensor> from_buffers = model.buffers(), to_buffers = model_->buffers();
  if (from.size() != to.size() || from_buffers.size() != to_buffers.size()) {
    return absl::FailedPreconditionError(
        StrCat("checkpoint snapshot: the model has ", from.size(), " parameters and ",
               from_buffers.size(), " buffers, its copy ", to.size(), " and ", to_buffers.size()));
  }
  std::unordered_map<const void*, size_t> index;
  for (size_t i = 0; i < from.size(); ++i) {
    if (from[i].sizes() != to[i].sizes() || from[i].scalar_type() != to[i].scalar_type()) {
      return absl::FailedPreconditionError(
          StrCat("checkpoint snapshot: parameter ", i, " differs in shape or type from its copy"));
    }
    index[from[i].unsafeGetTensorImpl()] = i;
  }
  for (size_t i = 0; i < from_buffers.size(); ++i) {
    if (from_buffers[i].sizes() != to_buffers[i].sizes()) {
      return absl::FailedPreconditionError(
          StrCat("checkpoint snapshot: buffer ", i, " differs in shape from its copy"));
    }
  }
  auto copy_of = [&](const torch::Tensor& p) -> absl::StatusOr<torch::Tensor> {
    auto it = index.find(p.unsafeGetTensorImpl());
    if (it == index.end()) {
      return absl::FailedPreconditionError(
          "checkpoint snapshot: the optimizer holds a tensor that is not a model parameter");
    }
    return to[it->second];
  };
  if (!optimizer_) {  // the copy's groups hold the copies of the optimizer's parameters, in order
    std::vector<torch::optim::OptimizerParamGroup> groups;
    for (auto& group : optimizer.param_groups()) {
      std::vector<torch::Tensor> params;
      for (const torch::Tensor& p : group.params()) {
        CART_ASSIGN_OR_RETURN(torch::Tensor q, copy_of(p));
        params.push_back(q);
      }
      groups.emplace_back(std::move(params), group.options().clone());
    }
    optimizer_ = std::make_unique<torch::optim::AdamW>(
        std::move(groups), static_cast<const torch::optim::AdamWOptions&>(optimizer.defaults()));
  }
  if (optimizer_->param_groups().size() != optimizer.param_groups().size()) {
    return absl::FailedPreconditionError("checkpoint snapshot: the optimizer's groups changed");
  }
  copies_.Begin(from.empty() ? c10::Device(c10::kCPU) : from[0].device());
  // A parameter of the copy stays the same tensor (the copy's optimizer holds it): where the copy
  // needs new memory (page-locked, the first time from a GPU) it takes the new storage.
  auto copy_into = [this](const torch::Tensor& dst, const torch::Tensor& src) {
    torch::Tensor target = dst;
    copies_.Copy(target, src);
    if (!target.is_same(dst)) dst.set_data(target);
  };
  for (size_t i = 0; i < from.size(); ++i) copy_into(to[i], from[i]);
  for (size_t i = 0; i < from_buffers.size(); ++i) copy_into(to_buffers[i], from_buffers[i]);
  for (size_t g = 0; g < optimizer.param_groups().size(); ++g) {
    auto& src = optimizer.param_groups()[g];
    auto& dst = optimizer_->param_groups()[g];
    dst.set_options(src.options().clone());
    if (src.params().size() != dst.params().size()) {
      return absl::FailedPreconditionError("checkpoint snapshot: the optimizer's groups changed");
    }
    for (size_t k = 0; k < src.params().size(); ++k) {
      const OptimizerStateKey key = StateKey(dst.params()[k]);
      auto it = optimizer.state().find(StateKey(src.params()[k]));
      if (it == optimizer.state().end()) {  // not stepped yet: no state, as in the original
        optimizer_->state().erase(key);
        continue;
      }
      const auto& a = static_cast<const torch::optim::AdamWParamState&>(*it->second);
      std::unique_ptr<torch::optim::OptimizerParamState>& slot = optimizer_->state()[key];
      if (!slot) slot = std::make_unique<torch::optim::AdamWParamState>();
      auto& b = static_cast<torch::optim::AdamWParamState&>(*slot);
      b.step(a.step());
      copies_.Copy(b.exp_avg(), a.exp_avg());
      copies_.Copy(b.exp_avg_sq(), a.exp_avg_sq());
      copies_.Copy(b.max_exp_avg_sq(), a.max_exp_avg_sq());
    }
  }
  copies_.End();
  rng_ = at::detail::getDefaultCPUGenerator().get_state();
  return absl::OkStatus();
}

std::vector<std::string> RemoveInterruptedWrites(const std::string& dir) {
  std::vector<std::string> removed;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.find(".tmp-") == std::string::npos || !entry.is_regular_file(ec)) continue;
    if (fs::remove(entry.path(), ec)) removed.push_back(name);
  }
  return removed;
}

absl::StatusOr<CheckpointManifest> WriteCheckpoint(const std::string& dir,
                                                   const CheckpointState& state,
                                                   torch::nn::Module& model,
                                                   torch::optim::Optimizer& optimizer, int64_t keep,
                                                   const CheckpointWriteOptions& write) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return absl::InternalError(StrCat("cannot create ", dir, ": ", ec.message()));
  const std::string name = StepName(state.step);
  const fs::path pt = fs::path(dir) / (name + ".pt");
  // Streamed into the file with a running checksum: a d = 1024 model's checkpoint is 1.4 GiB,
  // and building it in a string first cost two more copies of it on the training thread.
  CART_ASSIGN_OR_RETURN(AtomicFileWriter file, AtomicFileWriter::Open(pt.string()));
  uint32_t crc = 0;
  int64_t written = 0;
  absl::Status write_status;
  // The bytes go to the file through a staging buffer that stays in cache, not straight from each
  // tensor's memory: on this project's machines the kernel copied 1.4 GiB of trained tensors into
  // the page cache at about 450 MB/s, and from a 1 MiB buffer just filled at several GB/s (a
  // 4 MiB one was slow again; bench/train/checkpoint_bench.cc).
  std::vector<char> staging;
  staging.reserve(kStagingBytes);
  auto flush = [&] {
    if (write_status.ok() && !staging.empty())
      write_status = file.Write(staging.data(), staging.size());
    staging.clear();
    return write_status.ok();
  };
  try {
    // Once a write has failed (a full disk), the sink takes the rest without writing it, and the
    // failure is returned after the serializer finishes. Telling LibTorch's serializer "fewer
    // bytes" instead makes it throw, and it does so again from its writer's destructor while that
    // exception unwinds: std::terminate, the whole worker gone for one full disk.
    SaveArchive(state, model, optimizer, [&](const void* data, size_t n) -> size_t {
      if (!write_status.ok()) return n;
      const char* bytes = static_cast<const char*>(data);
      if (!write.staged) {
        write_status = file.Write(data, n);
        if (!write_status.ok()) return n;
      }
      for (size_t off = 0; write.staged && off < n;) {
        const size_t take = std::min(n - off, kStagingBytes - staging.size());
        staging.insert(staging.end(), bytes + off, bytes + off + take);
        off += take;
        if (staging.size() == kStagingBytes && !flush()) return n;
      }
      crc = ExtendChecksum(write.crc32c, crc, data, n);
      written += static_cast<int64_t>(n);
      return n;
    });
    flush();
  } catch (const std::exception& e) {
    CART_RETURN_IF_ERROR(write_status);
    return FromTorchError(e, "cannot serialize checkpoint");
  }
  CART_RETURN_IF_ERROR(write_status);
  CART_RETURN_IF_ERROR(write.durable ? file.Commit() : file.CommitWithoutSync());
  return FinishCheckpoint(dir, state, written, crc, keep, write);
}

std::vector<CheckpointManifest> ListCheckpoints(const std::string& dir,
                                                std::vector<std::string>* problems) {
  std::vector<CheckpointManifest> out;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const fs::path p = entry.path();
    if (p.extension() != ".json" || p.filename().string().rfind("step-", 0) != 0) continue;
    absl::StatusOr<CheckpointManifest> m = ReadManifest(p);
    if (m.ok()) {
      out.push_back(*m);
    } else if (problems != nullptr) {
      problems->push_back(Message(m.status()));
    }
  }
  std::sort(out.begin(), out.end(), [](const CheckpointManifest& a, const CheckpointManifest& b) {
    return a.step < b.step;
  });
  return out;
}

absl::StatusOr<CheckpointManifest> ImportCheckpoint(const std::string& file, const std::string& dir,
                                                    const std::string& config_yaml) {
  CART_ASSIGN_OR_RETURN(std::string bytes, ReadWholeFile(file));
  CheckpointManifest m;
  try {
    torch::serialize::InputArchive archive;
    std::istringstream is(bytes);
    archive.load_from(is, torch::Device(torch::kCPU));  // a GPU checkpoint reads on a CPU box
    torch::Tensor step, cursor;
    archive.read("step", step);
    archive.read("cursor", cursor);
    m.step = step.item<int64_t>();
    m.cursor = cursor.item<int64_t>();
  } catch (const std::exception& e) {
    // Out of memory is said as such (the file may well be fine); anything else means the file
    // is not a checkpoint this build can read.
    const absl::Status s = FromTorchError(e, "", absl::StatusCode::kDataLoss);
    return absl::Status(s.code(), absl::IsResourceExhausted(s)
                                      ? StrCat("reading checkpoint ", file, ": ", s.message())
                                      : StrCat(file, ": not a readable checkpoint: ", s.message()));
  }
  std::error_code ec;
  fs::create_directories(dir, ec);
  const std::string name = StepName(m.step);
  m.path = (fs::path(dir) / (name + ".pt")).string();
  m.bytes = static_cast<int64_t>(bytes.size());
  m.crc32 = Checksum(/*crc32c=*/true, bytes);
  m.crc32c = true;
  m.config_yaml = config_yaml;
  CART_RETURN_IF_ERROR(WriteFileAtomically(m.path, bytes));
  CART_RETURN_IF_ERROR(WriteFileAtomically((fs::path(dir) / (name + ".json")).string(),
                                           ManifestJson(m, name + ".pt").dump(2) + "\n"));
  return m;
}

absl::Status VerifyCheckpoint(const CheckpointManifest& m) {
  absl::StatusOr<std::string> bytes = ReadWholeFile(m.path);
  if (!bytes.ok())
    return absl::DataLossError(StrCat(m.path, ": missing: ", Message(bytes.status())));
  if (static_cast<int64_t>(bytes->size()) != m.bytes) {
    return absl::DataLossError(StrCat(m.path, ": truncated or padded: ", bytes->size(),
                                      " bytes, manifest says ", m.bytes));
  }
  if (Checksum(m.crc32c, *bytes) != m.crc32) {
    return absl::DataLossError(StrCat(m.path, ": corrupt: ", m.crc32c ? "CRC-32C" : "CRC-32",
                                      " does not match the manifest"));
  }
  return absl::OkStatus();
}

absl::Status LoadCheckpoint(const CheckpointManifest& m, torch::nn::Module& model,
                            torch::optim::Optimizer* optimizer) {
  CART_ASSIGN_OR_RETURN(std::string bytes, ReadWholeFile(m.path));
  if (static_cast<int64_t>(bytes.size()) != m.bytes || Checksum(m.crc32c, bytes) != m.crc32) {
    return VerifyCheckpoint(m);
  }
  try {
    // Tensors are mapped to the model's device as they are read: without that, a checkpoint
    // written on a GPU could not be read on a CPU-only box, and loading it into a CPU model would
    // silently move the model to the GPU (Module::load copies the device along with the data).
    const std::vector<torch::Tensor> params = model.parameters();
    const torch::Device device = params.empty() ? torch::Device(torch::kCPU) : params[0].device();
    torch::serialize::InputArchive archive;
    std::istringstream is(bytes);
    archive.load_from(is, device);
    torch::serialize::InputArchive model_archive;
    archive.read("model", model_archive);
    model.load(model_archive);
    if (optimizer != nullptr) {
      torch::serialize::InputArchive optimizer_archive;
      archive.read("optimizer", optimizer_archive);
      optimizer->load(optimizer_archive);
    }
    torch::Tensor rng;
    archive.read("rng_cpu", rng);
    at::Generator generator = at::detail::getDefaultCPUGenerator();
    generator.set_state(rng.to(torch::kCPU));  // the CPU generator takes a CPU byte tensor
  } catch (const std::exception& e) {
    return FromTorchError(e, StrCat(m.path, ": cannot restore checkpoint"),
                          absl::StatusCode::kDataLoss);
  }
  return absl::OkStatus();
}

absl::StatusOr<CheckpointManifest> LatestValidCheckpoint(const std::string& dir,
                                                         std::vector<std::string>* problems) {
  std::vector<CheckpointManifest> all = ListCheckpoints(dir, problems);
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    absl::Status s = VerifyCheckpoint(*it);
    if (s.ok()) return *it;
    if (problems != nullptr) problems->push_back(Message(s));
  }
  return absl::NotFoundError(StrCat(dir, ": no valid checkpoint"));
}

}  // namespace cart::train
