#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>

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
  // CLI11 reports bad arguments itself; anything else thrown is a bug, and still ends with a
  // message and exit status 1 rather than an abort.
  try {
    CLI11_PARSE(app, argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cart: internal error: %s (please report it)\n", e.what());
    return 1;
  }
  return 0;
}
