#pragma once

// The `cart` command tree. Each Register* function adds one family of subcommands to the app;
// their callbacks print results to stdout, errors to stderr, and report failure by throwing
// CLI::RuntimeError with the exit code (see ExitWith).

#include <CLI/CLI.hpp>

#include "absl/status/status.h"

namespace cart::cli {

void RegisterDataCommands(CLI::App& app);   // cart data ...      (data/)
void RegisterModelCommands(CLI::App& app);  // cart model ...     (model/, needs LibTorch)
void RegisterTrainCommands(CLI::App& app);  // cart train, eval   (train/, needs LibTorch)
void RegisterAdminCommands(CLI::App& app);  // cart admin ...     (store/)
// cart sweep | runs | results | workers — clients of cartd (rpc/)
void RegisterServiceCommands(CLI::App& app);
void RegisterUpCommand(CLI::App& app);  // cart up: embedded cartd + local workers (server/)

// Prints "cart: <message>" to stderr and throws CLI::RuntimeError with an exit code chosen from
// the status code: 2 for InvalidArgument/NotFound (bad input), 1 otherwise. Never returns.
[[noreturn]] void ExitWith(const absl::Status& status);

}  // namespace cart::cli
