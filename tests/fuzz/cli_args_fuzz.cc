// Fuzz target: the `cart` command line. The input is an argument list (arguments separated by
// NUL bytes); it is parsed by the same command tree `cart` builds, with every command's body
// switched off (cli::ParseOnly), so that the fuzzer exercises parsing and validation and never
// dials cartd, writes a file or starts a process. A parse error is an answer; any other exception
// escaping the parse is a finding.

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "cli/commands.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::string> args = {"cart"};
  std::string current;
  for (size_t i = 0; i < size && args.size() < 64; ++i) {
    if (data[i] == 0) {
      args.push_back(current);
      current.clear();
    } else {
      current += static_cast<char>(data[i]);
    }
  }
  if (!current.empty()) args.push_back(current);
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());

  cart::cli::ParseOnly() = true;
  CLI::App app{"cart", "cart"};
  app.require_subcommand(1);
  cart::cli::RegisterServiceCommands(app);
  cart::cli::RegisterDataCommands(app);
  cart::cli::RegisterAdminCommands(app);
  cart::cli::RegisterReportCommand(app);
  try {
    app.parse(static_cast<int>(argv.size()), argv.data());
  } catch (const CLI::Error&) {
    // CLI11 refused the arguments (or was asked for help): what `cart` reports and exits on.
  } catch (const std::exception& e) {
    std::fprintf(stderr, "an exception escaped the argument parser: %s\n", e.what());
    std::abort();
  }
  return 0;
}
