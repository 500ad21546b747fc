#include <CLI/CLI.hpp>

#include "cli/commands.h"
#include "common/version.h"

int main(int argc, char** argv) {
  CLI::App app{"cart: run the CART paper's experiments (CART Lab)", "cart"};
  app.set_version_flag("--version", std::string("cart ") + cart::kVersion);
  app.require_subcommand(1);
  cart::cli::RegisterServiceCommands(app);
  cart::cli::RegisterDataCommands(app);
#ifdef CART_CLI_WITH_TORCH
  cart::cli::RegisterModelCommands(app);
  cart::cli::RegisterTrainCommands(app);
#endif
#ifdef CART_CLI_WITH_SERVER
  cart::cli::RegisterUpCommand(app);
#endif
  cart::cli::RegisterAdminCommands(app);
  cart::cli::RegisterReportCommand(app);
  CLI11_PARSE(app, argc, argv);
  return 0;
}
