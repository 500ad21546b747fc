// cart sweep | runs | results | workers: the commands that talk to cartd, one file per command
// group (sweep_command.cc, runs_command.cc, results_command.cc, workers_command.cc). `cart export`
// talks to cartd too but needs LibTorch, so it is in cart-torch (export_client.cc). The shared
// connection flags and client are in client.h, the run table and formatting in format.h.

#include "cli/commands.h"

namespace cart::cli {

void RegisterServiceCommands(CLI::App& app) {
  RegisterSweepCommands(app);
  RegisterRunsCommands(app);
  RegisterReproduceCommand(app);
  RegisterResultsCommands(app);
  RegisterWorkersCommands(app);
  RegisterNotifyCommands(app);
  RegisterBudgetCommands(app);
  RegisterExportMetricsCommand(app);
}

}  // namespace cart::cli
