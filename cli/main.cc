// `cart`. The commands that need LibTorch (model, train, eval, export) live in the sibling
// program `cart-torch`, which this one runs in its place: every other command starts without
// loading LibTorch (about 0.6 s here), which is most of what `cart runs ls` used to cost.

#include <limits.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>

#include "cli/commands.h"
#include "common/version.h"

namespace {

// The LibTorch commands, with the help line `cart --help` shows for each.
constexpr std::pair<const char*, const char*> kTorchCommands[] = {
    {"model", "Model accounting and checks: params, init, logits, bench (LibTorch)"},
    {"train", "Train one run in this process, without cartd (LibTorch)"},
    {"eval", "Evaluate a trained run: perplexity by R_infer, zero-shot tasks (LibTorch)"},
    {"export", "Write a run's checkpoint as safetensors, from cartd or a run directory (LibTorch)"},
};

// Replaces this process with cart-torch from the same directory, with the same arguments.
// Returns only when that fails.
int RunTorchCommand(char** argv) {
  char self[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  std::string dir = ".";
  if (n > 0) {
    self[n] = '\0';
    dir = std::string(self);
    dir = dir.substr(0, dir.rfind('/'));
  }
  const std::string torch = dir + "/cart-torch";
  execv(torch.c_str(), argv);
  std::fprintf(stderr,
               "cart: '%s' needs cart-torch (the LibTorch half of cart), which could not be "
               "started from %s: %s. Build it with LibTorch (docs/architecture.md).\n",
               argv[1], torch.c_str(), std::strerror(errno));
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1) {
    for (const auto& [name, help] : kTorchCommands) {
      if (std::strcmp(argv[1], name) == 0) return RunTorchCommand(argv);
    }
  }
  CLI::App app{"cart: run the CART paper's experiments (CART Lab)", "cart"};
  app.set_version_flag("--version", std::string("cart ") + cart::kVersion);
  app.require_subcommand(1);
  cart::cli::RegisterServiceCommands(app);
  cart::cli::RegisterDataCommands(app);
#ifdef CART_CLI_WITH_SERVER
  cart::cli::RegisterUpCommand(app);
#endif
  cart::cli::RegisterAdminCommands(app);
  cart::cli::RegisterReportCommand(app);
  cart::cli::RegisterPlanCommand(app);
  // Listed in the help; main() hands them to cart-torch before parsing.
  for (const auto& [name, help] : kTorchCommands) app.add_subcommand(name, help);
  return cart::cli::ParseAndRun(app, argc, argv);
}
