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

// A checkpoint serialized into memory, to be written by CommitCheckpoint on another thread while
// training goes on (docs/design.md "Storage"). Clear() keeps the blocks: the next checkpoint is
// serialized into memory already mapped, instead of faulting 1.4 GiB in again on the training
// thread.
class CheckpointBytes {
 public:
  void Append(const void* data, size_t n);
  void Clear() { size_ = 0; }
  int64_t size() const { return size_; }
  // Calls `f(data, n)` over the bytes in order; stops at the first error.
  absl::Status ForEachPiece(const std::function<absl::Status(const char*, size_t)>& f) const;

 private:
  static constexpr size_t kBlock = size_t{4} << 20;
  std::vector<std::unique_ptr<char[]>> blocks_;
  int64_t size_ = 0;
};

// The first half of WriteCheckpoint, on the training thread: `model`, `optimizer`, the step, the
// cursor and the CPU RNG state serialized into `out` (cleared first). Tensors on a GPU are copied
// to the host here, so that the checkpoint is of this moment whatever training does next.
absl::Status SerializeCheckpoint(const CheckpointState& state, torch::nn::Module& model,
                                 torch::optim::Optimizer& optimizer, CheckpointBytes& out);

// The second half, on any thread: writes `bytes` (of `state`) into `dir` as WriteCheckpoint does
// (checksum, atomic file, then manifest), then applies retention. Touches neither model nor
// optimizer; `bytes` must stay unchanged until it returns.
absl::StatusOr<CheckpointManifest> CommitCheckpoint(const std::string& dir,
                                                    const CheckpointState& state,
                                                    const CheckpointBytes& bytes, int64_t keep,
                                                    const CheckpointWriteOptions& write = {});

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
