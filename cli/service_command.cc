// cart sweep | runs | results | workers | export: the commands that talk to cartd, one file per
// command group (sweep_command.cc, runs_command.cc, results_command.cc, workers_command.cc,
// export_client.cc); the shared connection flags and client are in client.h, the run table and
// formatting in format.h.

#include "cli/commands.h"

namespace cart::cli {

void RegisterServiceCommands(CLI::App& app) {
  RegisterSweepCommands(app);
  RegisterRunsCommands(app);
  RegisterResultsCommands(app);
  RegisterWorkersCommands(app);
#ifdef CART_CLI_WITH_TORCH
  RegisterExportCommand(app);
#endif
}

}  // namespace cart::cli
