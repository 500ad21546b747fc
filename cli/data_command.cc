#include "cli/commands.h"

namespace cart::cli {

// The data commands are being written (issue 4); until then `cart data` does not exist.
void RegisterDataCommands(CLI::App& app) {}

}  // namespace cart::cli
