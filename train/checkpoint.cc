#include "train/checkpoint.h"

#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/crc32c.h"
#include "common/file.h"
#include "common/status.h"
#include "common/strings.h"
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
  archive.write("rng_cpu", at::detail::getDefaultCPUGenerator().get_state());
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

void CheckpointBytes::Append(const void* data, size_t n) {
  const char* bytes = static_cast<const char*>(data);
  while (n > 0) {
    const size_t block = static_cast<size_t>(size_) / kBlock;
    const size_t off = static_cast<size_t>(size_) % kBlock;
    if (block == blocks_.size()) blocks_.push_back(std::make_unique<char[]>(kBlock));
    const size_t take = std::min(n, kBlock - off);
    std::memcpy(blocks_[block].get() + off, bytes, take);
    bytes += take;
    n -= take;
    size_ += static_cast<int64_t>(take);
  }
}

absl::Status CheckpointBytes::ForEachPiece(
    const std::function<absl::Status(const char*, size_t)>& f) const {
  for (size_t block = 0; static_cast<int64_t>(block * kBlock) < size_; ++block) {
    const size_t n = std::min(kBlock, static_cast<size_t>(size_) - block * kBlock);
    CART_RETURN_IF_ERROR(f(blocks_[block].get(), n));
  }
  return absl::OkStatus();
}

absl::Status SerializeCheckpoint(const CheckpointState& state, torch::nn::Module& model,
                                 torch::optim::Optimizer& optimizer, CheckpointBytes& out) {
  out.Clear();
  try {
    SaveArchive(state, model, optimizer, [&](const void* data, size_t n) -> size_t {
      out.Append(data, n);
      return n;
    });
  } catch (const std::exception& e) {
    return FromTorchError(e, "cannot serialize checkpoint");
  }
  return absl::OkStatus();
}

absl::StatusOr<CheckpointManifest> CommitCheckpoint(const std::string& dir,
                                                    const CheckpointState& state,
                                                    const CheckpointBytes& bytes, int64_t keep,
                                                    const CheckpointWriteOptions& write) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return absl::InternalError(StrCat("cannot create ", dir, ": ", ec.message()));
  const fs::path pt = fs::path(dir) / (StepName(state.step) + ".pt");
  CART_ASSIGN_OR_RETURN(AtomicFileWriter file, AtomicFileWriter::Open(pt.string()));
  uint32_t crc = 0;
  CART_RETURN_IF_ERROR(bytes.ForEachPiece([&](const char* data, size_t n) {
    crc = ExtendChecksum(write.crc32c, crc, data, n);
    return file.Write(data, n);
  }));
  CART_RETURN_IF_ERROR(write.durable ? file.Commit() : file.CommitWithoutSync());
  return FinishCheckpoint(dir, state, bytes.size(), crc, keep, write);
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
    SaveArchive(state, model, optimizer, [&](const void* data, size_t n) -> size_t {
      if (!write_status.ok()) return 0;
      const char* bytes = static_cast<const char*>(data);
      if (!write.staged) {
        write_status = file.Write(data, n);
        if (!write_status.ok()) return 0;
      }
      for (size_t off = 0; write.staged && off < n;) {
        const size_t take = std::min(n - off, kStagingBytes - staging.size());
        staging.insert(staging.end(), bytes + off, bytes + off + take);
        off += take;
        if (staging.size() == kStagingBytes && !flush()) return 0;
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
