#include <cstdio>
#include <filesystem>
#include <iostream>

#include "cli/commands.h"
#include "common/strings.h"

namespace cart::cli {

void OnRun(CLI::App* command, std::function<void()> body) {
  command->callback([body = std::move(body)] {
    if (!ParseOnly()) body();
  });
}

int ParseAndRun(CLI::App& app, int argc, char** argv) {
  try {
    CLI11_PARSE(app, argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cart: internal error: %s (please report it)\n", e.what());
    return 1;
  }
  return 0;
}

bool& ParseOnly() {
  static bool parse_only = false;
  return parse_only;
}

std::unique_ptr<store::RunStore> OpenDatabaseFile(const std::string& path, const char* flag) {
  if (!std::filesystem::exists(path)) {
    ExitWith(absl::NotFoundError(StrCat(flag, " ", path, ": no such database file")));
  }
  store::StoreOptions options;
  options.path = path;
  absl::StatusOr<std::unique_ptr<store::RunStore>> opened = store::RunStore::Open(options);
  if (!opened.ok()) ExitWith(opened.status());
  return *std::move(opened);
}

void ExitWith(const absl::Status& status) {
  std::cerr << "cart: " << Message(status) << "\n";
  const bool bad_input = status.code() == absl::StatusCode::kInvalidArgument ||
                         status.code() == absl::StatusCode::kNotFound;
  throw CLI::RuntimeError(bad_input ? 2 : 1);
}

}  // namespace cart::cli
