// `cart-torch`: the commands of `cart` that need LibTorch (model, train, eval, export). `cart`
// runs it in its own place for those commands, with the same arguments; it is not meant to be
// called by name, and answers to "cart" in its help and errors.

#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>

#include "cli/commands.h"
#include "common/version.h"
#include "train/device.h"

int main(int argc, char** argv) {
  // Before any CUDA allocation: expandable segments, unless the user configured the allocator.
  cart::train::ConfigureCudaAllocator();
  CLI::App app{"cart: run the CART paper's experiments (CART Lab)", "cart"};
  app.set_version_flag("--version", std::string("cart ") + cart::kVersion);
  app.require_subcommand(1);
  cart::cli::RegisterModelCommands(app);
  cart::cli::RegisterTrainCommands(app);
  cart::cli::RegisterExportCommand(app);
  return cart::cli::ParseAndRun(app, argc, argv);
}
