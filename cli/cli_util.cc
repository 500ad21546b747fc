#include <iostream>

#include "cli/commands.h"
#include "common/strings.h"

namespace cart::cli {

void OnRun(CLI::App* command, std::function<void()> body) {
  command->callback([body = std::move(body)] {
    if (!ParseOnly()) body();
  });
}

bool& ParseOnly() {
  static bool parse_only = false;
  return parse_only;
}

void ExitWith(const absl::Status& status) {
  std::cerr << "cart: " << Message(status) << "\n";
  const bool bad_input = status.code() == absl::StatusCode::kInvalidArgument ||
                         status.code() == absl::StatusCode::kNotFound;
  throw CLI::RuntimeError(bad_input ? 2 : 1);
}

}  // namespace cart::cli
