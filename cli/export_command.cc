// `cart export`, the LibTorch half: a checkpoint (from a `cart train` directory or downloaded from
// cartd) restored into its model and written as safetensors under docs/model.md §8 names.

#include <unistd.h>

#include <filesystem>
#include <memory>

#include "cli/commands.h"
#include "common/file.h"
#include "common/status.h"
#include "common/strings.h"
#include "config/config.h"
#include "model/language_model.h"
#include "model/safetensors.h"
#include "train/checkpoint.h"

namespace cart::cli {
namespace fs = std::filesystem;

namespace {

// Removes a path (file or directory tree) when it goes out of scope, however the scope ends.
class RemoveOnExit {
 public:
  explicit RemoveOnExit(fs::path path) : path_(std::move(path)) {}
  ~RemoveOnExit() {
    std::error_code ec;
    if (!path_.empty()) fs::remove_all(path_, ec);
  }
  RemoveOnExit(const RemoveOnExit&) = delete;
  RemoveOnExit& operator=(const RemoveOnExit&) = delete;

 private:
  fs::path path_;
};

}  // namespace

absl::StatusOr<ExportResult> ExportModel(const ExportRequest& request) {
  torch::Dtype dtype = torch::kFloat32;
  if (request.dtype == "bf16") {
    dtype = torch::kBFloat16;
  } else if (request.dtype != "fp32") {
    return absl::InvalidArgumentError(
        StrCat("--dtype '", request.dtype, "': allowed values are fp32, bf16"));
  }
  std::string config_yaml = request.config_yaml;
  train::CheckpointManifest manifest;
  std::unique_ptr<RemoveOnExit> scratch_guard;
  if (!request.run_dir.empty()) {
    // A `cart train` directory: its config and its checkpoints/ (newest valid, or --step).
    CART_ASSIGN_OR_RETURN(config_yaml, ReadWholeFile(request.run_dir + "/config.yaml"));
    const std::string dir = request.run_dir + "/checkpoints";
    std::vector<std::string> problems;
    if (request.step > 0) {
      std::vector<std::string> steps;
      bool found = false;
      for (const train::CheckpointManifest& m : train::ListCheckpoints(dir, &problems)) {
        steps.push_back(StrCat(m.step));
        if (m.step == request.step) {
          manifest = m;
          found = true;
        }
      }
      if (!found) {
        return absl::NotFoundError(StrCat(dir, " has no checkpoint at step ", request.step,
                                          steps.empty()
                                              ? std::string("; it has none")
                                              : "; it has steps " + StrJoin(steps, ", ")));
      }
      CART_RETURN_IF_ERROR(train::VerifyCheckpoint(manifest));
    } else {
      CART_ASSIGN_OR_RETURN(manifest, train::LatestValidCheckpoint(dir, &problems));
    }
  } else {
    // A checkpoint file fetched from cartd: adopt it beside the output (verified, with a
    // manifest) in a directory of its own that goes away with this scope.
    const fs::path scratch = fs::path(request.out).concat(StrCat(".import-", getpid()));
    scratch_guard = std::make_unique<RemoveOnExit>(scratch);
    CART_ASSIGN_OR_RETURN(
        manifest, train::ImportCheckpoint(request.checkpoint_file, scratch.string(), config_yaml));
  }
  CART_ASSIGN_OR_RETURN(model::RunConfig config,
                        model::ParseRunConfigYaml(config_yaml, request.source + " config"));
  CART_ASSIGN_OR_RETURN(auto m, model::BuildModel(config.model, config.train.seed));
  CART_RETURN_IF_ERROR(train::LoadCheckpoint(manifest, *m, nullptr));
  std::map<std::string, std::string> metadata = request.metadata;
  metadata["cart_source"] = request.source;
  metadata["cart_step"] = StrCat(manifest.step);
  CART_RETURN_IF_ERROR(model::SaveModel(*m, request.out, dtype, metadata));
  ExportResult result;
  result.step = manifest.step;
  for (const torch::Tensor& p : m->parameters()) result.parameters += p.numel();
  return result;
}

}  // namespace cart::cli
