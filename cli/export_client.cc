// cart export, the gRPC half: a run's checkpoint downloaded from cartd (GetCheckpoint) and
// handed to the LibTorch half in export_command.cc, which keeps Torch headers out of this file.

#include <fmt/format.h>
#include <unistd.h>

#include <filesystem>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <thread>

#include "cart/v1/scheduler.grpc.pb.h"
#include "cli/client.h"
#include "cli/commands.h"
#include "cli/format.h"
#include "cli/table.h"
#include "common/file.h"
#include "common/status.h"
#include "common/strings.h"
#include "rpc/artifacts.h"
#include "rpc/client.h"

namespace cart::cli {
namespace {

using cart::v1::RunState;

// Downloads run `run_id`'s checkpoint (`step`, 0: the newest) to `path`, checking the size and
// sha256 announced in the first chunk; returns the sha256.
std::string DownloadCheckpoint(Client& client, int64_t run_id, int64_t step,
                               const std::string& path) {
  cart::v1::GetCheckpointRequest req;
  req.set_run_id(run_id);
  req.set_step(step);
  grpc::ClientContext ctx;
  rpc::PrepareContext(ctx, client.config(), 0);
  auto reader = client.stub().GetCheckpoint(&ctx, req);
  absl::StatusOr<std::string> sha256 =
      rpc::ReceiveArtifact(*reader, path, "", StrCat("checkpoint of run ", run_id));
  if (!sha256.ok()) client.Fail(sha256.status());  // with the hints for connection errors
  return *sha256;
}

struct ExportArgs {
  Conn conn;
  std::string source, out, dtype = "fp32", format = "safetensors", tokenizer;
  int64_t step = 0;
};

// `cart export SOURCE --out FILE`: from a `cart train` folder, or a run's checkpoint downloaded
// from cartd (removed again however this ends).
void ExportCommand(const ExportArgs& a) {
  ExportRequest req;
  req.out = a.out;
  req.dtype = a.dtype;
  req.format = a.format;
  req.tokenizer = a.tokenizer;
  if (a.format == "hf" && std::filesystem::exists(a.out)) {
    ExitWith(absl::AlreadyExistsError(
        StrCat("--out ", a.out, " exists; a model directory is written only to a new path")));
  }
  std::string download;
  // The downloaded checkpoint goes away however this ends (ExitWith throws).
  struct RemoveDownload {
    const std::string& path;
    ~RemoveDownload() {
      if (!path.empty()) std::remove(path.c_str());
    }
  } remove_download{download};
  if (std::filesystem::is_directory(a.source)) {
    req.run_dir = a.source;
    req.step = a.step;
    req.source = a.source;
  } else {
    Client client = Client::Connect(a.conn);
    cart::v1::GetRunRequest get;
    if (std::optional<int64_t> id = ParseInt64(a.source)) {
      get.set_run_id(*id);
    } else {
      get.set_name(a.source);
    }
    const cart::v1::GetRunResponse run =
        client.Call<cart::v1::GetRunRequest, cart::v1::GetRunResponse>(
            &cart::v1::SchedulerService::Stub::GetRun, get);
    download = StrCat(a.out, ".download-", getpid());
    const std::string sha256 = DownloadCheckpoint(client, run.run().run_id(), a.step, download);
    req.checkpoint_file = download;
    req.config_yaml = run.run().config_yaml();
    req.source = StrCat("run ", run.run().run_id(), " (", run.run().name(), ")");
    req.metadata = {{"cart_run", run.run().name()}, {"cart_checkpoint_sha256", sha256}};
  }
  absl::StatusOr<ExportResult> result = ExportModel(req);
  if (!result.ok()) ExitWith(result.status());
  if (a.conn.json) {
    std::cout << nlohmann::json{{"source", req.source},
                                {"step", result->step},
                                {"parameters", result->parameters},
                                {"format", a.format},
                                {"out", a.out}}
                     .dump()
              << "\n";
    return;
  }
  std::cout << fmt::format("exported {} at step {}: {} parameters ({}{}) -> {}\n", req.source,
                           result->step, result->parameters, a.dtype,
                           a.format == "hf" ? ", Hugging Face model directory" : "", a.out);
}

void RegisterExport(CLI::App& app) {
  auto a = std::make_shared<ExportArgs>();
  CLI::App* cmd = app.add_subcommand(
      "export",
      "A checkpoint as safetensors with docs/model.md §8 names, or (--format hf) as a Hugging "
      "Face transformers model directory (docs/huggingface.md): from a `cart train` directory, "
      "or of a run on cartd (by id or <sweep>/<index>)");
  cmd->add_option("source", a->source, "A `cart train` output directory, or a run id / name")
      ->required();
  cmd->add_option("--out", a->out,
                  "Output .safetensors file, or (--format hf) a directory that does not exist yet")
      ->required();
  cmd->add_option("--format", a->format,
                  "safetensors: one file; hf: a model directory transformers and lm-eval load "
                  "with trust_remote_code")
      ->check(CLI::IsMember({"safetensors", "hf"}))
      ->capture_default_str();
  cmd->add_option(
      "--tokenizer", a->tokenizer,
      "hf: the tokenizer to write (bytes, a SentencePiece .model, gpt2:<dir>); default: "
      "the one the run's train_data names");
  cmd->add_option("--step", a->step, "The checkpoint at this step (default: the newest)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--dtype", a->dtype, "Weights as fp32 or bf16")->capture_default_str();
  AddConnFlags(cmd, a->conn);
  OnRun(cmd, [a] { ExportCommand(*a); });
}

}  // namespace

void RegisterExportCommand(CLI::App& app) { RegisterExport(app); }

}  // namespace cart::cli
