#pragma once

// The `cart` command tree. Each Register* function adds one family of subcommands to the app;
// their callbacks print results to stdout, errors to stderr, and report failure by throwing
// CLI::RuntimeError with the exit code (see ExitWith).

#include <CLI/CLI.hpp>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "store/run_store.h"

namespace cart::cli {

void RegisterDataCommands(CLI::App& app);             // cart data ...      (data/)
void RegisterModelCommands(CLI::App& app);            // cart model ...     (model/, needs LibTorch)
void RegisterModelBenchCommand(CLI::App& model_cmd);  // cart model bench (bench_command.cc)
void RegisterTrainCommands(CLI::App& app);            // cart train, eval   (train/, needs LibTorch)
void RegisterAdminCommands(CLI::App& app);            // cart admin ...     (store/)
// cart sweep | runs | results | workers — clients of cartd (rpc/)
void RegisterServiceCommands(CLI::App& app);
void RegisterSweepCommands(CLI::App& app);         // sweep_command.cc
void RegisterRunsCommands(CLI::App& app);          // runs_command.cc
void RegisterRunsDiffCommand(CLI::App& runs);      // cart runs diff (runs_diff.cc)
void RegisterReproduceCommand(CLI::App& app);      // cart reproduce (runs_diff.cc)
void RegisterResultsCommands(CLI::App& app);       // results_command.cc
void RegisterWorkersCommands(CLI::App& app);       // workers_command.cc
void RegisterNotifyCommands(CLI::App& app);        // notify_command.cc
void RegisterBudgetCommands(CLI::App& app);        // budget_command.cc
void RegisterExportMetricsCommand(CLI::App& app);  // export_metrics_command.cc (TensorBoard)
void RegisterExportCommand(CLI::App& app);         // export_client.cc (needs LibTorch)
void RegisterUpCommand(CLI::App& app);      // cart up: embedded cartd + local workers (server/)
void RegisterReportCommand(CLI::App& app);  // cart report (report/)
void RegisterPlanCommand(CLI::App& app);    // cart plan (report/plan.h)
// tag | untag | note under `cart runs` (sweep = false) or `cart sweep` (annotate_command.cc)
void AddAnnotateCommands(CLI::App* parent, bool sweep);

// cart export, the LibTorch half (export_command.cc; only in builds with LibTorch). Either
// `run_dir` (a `cart train` directory: its config and newest valid checkpoint, or the one at
// `step`) or `checkpoint_file` + `config_yaml` (a checkpoint downloaded from cartd) is set.
struct ExportRequest {
  std::string run_dir;
  int64_t step = 0;  // run_dir only; 0: the newest
  std::string checkpoint_file;
  std::string config_yaml;
  std::string source;  // what the metadata and errors call it ("run 12 (stage1/3)", a directory)
  std::string out;     // .safetensors, or the model directory of format "hf"
  std::string format = "safetensors";           // safetensors | hf (hf/export.h)
  std::string tokenizer;                        // hf: this spec, not the run's train_data's
  std::string dtype = "fp32";                   // fp32 | bf16
  std::map<std::string, std::string> metadata;  // added to the file's __metadata__
};
struct ExportResult {
  int64_t step = 0;
  int64_t parameters = 0;
};
absl::StatusOr<ExportResult> ExportModel(const ExportRequest& request);

// Sets what a command does once its arguments are parsed. Every command registers its body here
// rather than with CLI::App::callback, so that the arguments fuzzer (tests/fuzz/cli_args_fuzz.cc)
// can parse and validate any argument list without running anything (ParseOnly).
void OnRun(CLI::App* command, std::function<void()> body);
// While true, OnRun bodies are skipped. Off in `cart` itself.
bool& ParseOnly();

// Parses the command line and runs the chosen command: CLI11 reports bad arguments itself;
// anything else thrown is a bug, and still ends with a message and exit status 1 rather than an
// abort. Returns the exit status (main's return value).
int ParseAndRun(CLI::App& app, int argc, char** argv);

// A cartd database file opened as cartd opens it (`--db` of cart report and cart results): an
// older schema is migrated. Exits with NotFound naming `flag` and the path when there is none.
std::unique_ptr<store::RunStore> OpenDatabaseFile(const std::string& path, const char* flag);

// Prints "cart: <message>" to stderr and throws CLI::RuntimeError with an exit code chosen from
// the status code: 2 for InvalidArgument/NotFound (bad input), 1 otherwise. Never returns.
[[noreturn]] void ExitWith(const absl::Status& status);

}  // namespace cart::cli
