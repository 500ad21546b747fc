#include <iostream>

#include "cli/commands.h"
#include "common/strings.h"

namespace cart::cli {

void ExitWith(const absl::Status& status) {
  std::cerr << "cart: " << Message(status) << "\n";
  const bool bad_input = status.code() == absl::StatusCode::kInvalidArgument ||
                         status.code() == absl::StatusCode::kNotFound;
  throw CLI::RuntimeError(bad_input ? 2 : 1);
}

}  // namespace cart::cli
