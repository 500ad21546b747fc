#pragma once

// Training checkpoints: model + optimizer + step + data cursor + RNG state + config, in one file
// per step (`checkpoints/step-<8 digits>.pt`, a LibTorch archive) and a manifest beside it
// (`step-<8 digits>.json`: step, byte size, CRC-32, config). Both are written atomically, the
// manifest last, so a checkpoint exists exactly when its manifest does; the CRC and size catch a
// file truncated or corrupted afterwards, and such a checkpoint is reported, never loaded.

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace cart::train {

struct CheckpointManifest {
  int64_t step = 0;         // optimizer steps completed
  int64_t bytes = 0;        // size of the .pt file
  uint32_t crc32 = 0;       // of the .pt file
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

// Writes checkpoint `state` of `model` and `optimizer` into `dir`, then deletes all but the
// `keep` newest checkpoints. Returns the manifest written.
absl::StatusOr<CheckpointManifest> WriteCheckpoint(const std::string& dir,
                                                   const CheckpointState& state,
                                                   torch::nn::Module& model,
                                                   torch::optim::Optimizer& optimizer,
                                                   int64_t keep);

// Every checkpoint manifest in `dir`, oldest first (unreadable manifests are skipped and listed
// in `problems`).
std::vector<CheckpointManifest> ListCheckpoints(const std::string& dir,
                                                std::vector<std::string>* problems = nullptr);

// Verifies size and CRC, then restores `model`, `optimizer` (may be null: evaluation) and the
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

// Checks size and CRC-32 of the checkpoint file against its manifest.
absl::Status VerifyCheckpoint(const CheckpointManifest& manifest);

}  // namespace cart::train
