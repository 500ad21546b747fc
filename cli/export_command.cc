// `cart export`, the LibTorch half: a checkpoint (from a `cart train` directory or downloaded from
// cartd) restored into its model and written as safetensors under docs/model.md §8 names, or as a
// Hugging Face transformers model directory (hf/export.h).

#include <unistd.h>

#include <filesystem>
#include <memory>

#include "cli/commands.h"
#include "common/file.h"
#include "common/status.h"
#include "common/strings.h"
#include "config/config.h"
#include "hf/export.h"
#include "model/language_model.h"
#include "model/safetensors.h"
#include "train/checkpoint.h"
#include "train/zero_shot.h"

namespace cart::cli {
namespace fs = std::filesystem;

absl::StatusOr<ExportResult> ExportModel(const ExportRequest& request) {
  CART_ASSIGN_OR_RETURN(const torch::Dtype dtype, model::ExportDtype(request.dtype));
  if (request.format != "safetensors" && request.format != "hf") {
    return absl::InvalidArgumentError(
        StrCat("--format '", request.format, "': allowed values are safetensors, hf"));
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
    scratch_guard = std::make_unique<RemoveOnExit>(scratch.string());
    CART_ASSIGN_OR_RETURN(
        manifest, train::ImportCheckpoint(request.checkpoint_file, scratch.string(), config_yaml));
  }
  CART_ASSIGN_OR_RETURN(config::RunConfig config,
                        config::ParseRunConfigYaml(config_yaml, request.source + " config"));
  CART_ASSIGN_OR_RETURN(auto m, model::BuildModel(config.model, config.train.seed));
  CART_RETURN_IF_ERROR(train::LoadCheckpoint(manifest, *m, nullptr));
  std::map<std::string, std::string> metadata = request.metadata;
  if (request.format == "hf") {
    hf::HfExportRequest hf_request;
    hf_request.out_dir = request.out;
    hf_request.dtype = request.dtype;
    hf_request.source = request.source;
    hf_request.step = manifest.step;
    hf_request.metadata = metadata;
    hf_request.tokenizer_spec = request.tokenizer;
    if (hf_request.tokenizer_spec.empty()) {
      absl::StatusOr<std::unique_ptr<data::Tokenizer>> tokenizer = train::RunTokenizer(config);
      if (!tokenizer.ok()) {
        return absl::Status(
            tokenizer.status().code(),
            StrCat("the tokenizer of ", request.source, ": ", tokenizer.status().message(),
                   " (give --tokenizer SPEC: bytes, a SentencePiece .model, or "
                   "gpt2:<dir>)"));
      }
      hf_request.tokenizer_spec = (*tokenizer)->spec();
    }
    CART_RETURN_IF_ERROR(hf::ExportHfModel(*m, config, hf_request));
  } else {
    metadata["cart_source"] = request.source;
    metadata["cart_step"] = StrCat(manifest.step);
    CART_RETURN_IF_ERROR(model::SaveModel(*m, request.out, dtype, metadata));
  }
  ExportResult result;
  result.step = manifest.step;
  for (const torch::Tensor& p : m->parameters()) result.parameters += p.numel();
  return result;
}

}  // namespace cart::cli
