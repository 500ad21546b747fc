#pragma once

// Training checkpoints: model + optimizer + step + data cursor + RNG state + config, in one file
// per step (`checkpoints/step-<8 digits>.pt`, a LibTorch archive) and a manifest beside it
// (`step-<8 digits>.json`: step, byte size, checksum, config). Both are written atomically, the
// manifest last, so a checkpoint exists exactly when its manifest does; the checksum and size
// catch a file truncated or corrupted afterwards, and such a checkpoint is reported, never loaded.
// The checksum is CRC-32C (`crc32c` in the manifest; common/crc32c.h, in hardware); manifests
// written before it carry zlib's CRC-32 (`crc32`), and still verify.

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "train/device.h"

namespace cart::train {

struct CheckpointManifest {
  int64_t step = 0;         // optimizer steps completed
  int64_t bytes = 0;        // size of the .pt file
  uint32_t crc32 = 0;       // of the .pt file: CRC-32C, or zlib's CRC-32 when !crc32c
  bool crc32c = true;       // false: an older manifest's zlib CRC-32
  int64_t cursor = 0;       // data cursor (next window) after `step`
  std::string config_yaml;  // the resolved run config
  std::string path;         // the .pt file (absolute or relative to the working directory)
};

// What goes into a checkpoint. Module and optimizer are saved with LibTorch's serializer.
struct CheckpointState {
  int64_t step = 0;
  int64_t cursor = 0;
  std::string config_yaml;
  // The CPU generator's state to save; undefined: the generator's state when the archive is
  // written (a snapshot written on another thread takes it when the snapshot is taken).
  torch::Tensor rng_cpu;
};

struct CheckpointWriteOptions {
  // fsync the file and its directory before returning. False: the write is still whole and
  // atomic (a killed process leaves the old state or the new), not durable against a power cut;
  // for a worker, whose durable copy is the one cartd's store keeps (docs/design.md "Storage").
  bool durable = true;
  // False: zlib's CRC-32 in the manifest, as before CRC-32C (benchmarks and tests of old files).
  bool crc32c = true;
  // False: each tensor's bytes handed to write(2) from its own memory, as before, instead of
  // through a 1 MiB staging buffer (for benchmarks: the buffer made the write 2.5× faster).
  bool staged = true;
  // Called with the file of each old checkpoint that retention drops, after its manifest is gone,
  // instead of deleting the file here. Unset: deleted here. A worker hands them to its upload
  // thread: freeing 1.4 GiB takes the kernel 0.3 s that the training loop need not wait for.
  std::function<void(const std::string& path)> discard;
};

// Writes checkpoint `state` of `model` and `optimizer` into `dir`, then deletes all but the
// `keep` newest checkpoints. Returns the manifest written.
absl::StatusOr<CheckpointManifest> WriteCheckpoint(const std::string& dir,
                                                   const CheckpointState& state,
                                                   torch::nn::Module& model,
                                                   torch::optim::Optimizer& optimizer, int64_t keep,
                                                   const CheckpointWriteOptions& write = {});

// A copy of a model and its AdamW optimizer in host memory, taken on the training thread with
// tensor copies alone and written by WriteCheckpoint on another thread while training goes on
// (docs/design.md "Storage"). LibTorch's serializer (archive layout, zip records and their
// checksums) then runs on the writing thread: serializing 1.4 GiB on the loop took 0.95 s, copying
// it takes a fraction of that. The copy's memory is kept between checkpoints, so the next one
// copies into pages already mapped.
class CheckpointSnapshot {
 public:
  // `copy`: a model of the trained one's structure (model::BuildModel of its config), on the
  // CPU; its values do not matter, Take overwrites them. The snapshot owns it.
  explicit CheckpointSnapshot(std::shared_ptr<torch::nn::Module> copy);
  // Copies `model`'s parameters and buffers, `optimizer`'s parameter groups (their options, the
  // learning rate among them) and per-parameter state (step and moments), and the CPU
  // generator's state. FailedPrecondition when `model` is not of the copy's structure.
  // From a model on CUDA the copies are queued on a side stream into page-locked memory
  // (train::HostCopies) and Take returns before they are done: call BeforeUpdate before the
  // next optimizer step and WaitForCopies before reading the copies. On the CPU both do nothing.
  absl::Status Take(torch::nn::Module& model, torch::optim::AdamW& optimizer);
  void BeforeUpdate() { copies_.Fence(); }
  void WaitForCopies() { copies_.Wait(); }
  // The copies, for WriteCheckpoint (with rng() as the state's rng_cpu); valid after a Take.
  torch::nn::Module& model() { return *model_; }
  torch::optim::AdamW& optimizer() { return *optimizer_; }
  const torch::Tensor& rng() const { return rng_; }

 private:
  std::shared_ptr<torch::nn::Module> model_;
  std::unique_ptr<torch::optim::AdamW> optimizer_;
  torch::Tensor rng_;
  HostCopies copies_;
};

// Removes what a killed write left in `dir`: AtomicFileWriter's "<name>.tmp-<pid>-<n>" files
// (a checkpoint's are as large as the checkpoint). Only for a directory no other process writes.
// The names removed.
std::vector<std::string> RemoveInterruptedWrites(const std::string& dir);

// Every checkpoint manifest in `dir`, oldest first (unreadable manifests are skipped and listed
// in `problems`).
std::vector<CheckpointManifest> ListCheckpoints(const std::string& dir,
                                                std::vector<std::string>* problems = nullptr);

// Verifies size and checksum, then restores `model`, `optimizer` (may be null: evaluation) and the
// global RNG from the checkpoint. DataLoss naming the file when it is truncated or corrupt;
// nothing is modified then.
absl::Status LoadCheckpoint(const CheckpointManifest& manifest, torch::nn::Module& model,
                            torch::optim::Optimizer* optimizer);

// The newest checkpoint in `dir` that passes verification. Corrupt newer ones are named in
// `problems`. NotFound when there is none.
absl::StatusOr<CheckpointManifest> LatestValidCheckpoint(const std::string& dir,
                                                         std::vector<std::string>* problems);

// Adopts a checkpoint file that came from elsewhere (downloaded from cartd's artifact store):
// reads its step and cursor from the archive, copies it into `dir` as step-N.pt and writes the
// manifest with `config_yaml`. DataLoss when the file is not a readable checkpoint.
absl::StatusOr<CheckpointManifest> ImportCheckpoint(const std::string& file, const std::string& dir,
                                                    const std::string& config_yaml);

// Checks size and checksum of the checkpoint file against its manifest.
absl::Status VerifyCheckpoint(const CheckpointManifest& manifest);

}  // namespace cart::train
