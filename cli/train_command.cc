#include "cli/commands.h"

namespace cart::cli {

void RegisterTrainCommands(CLI::App& app) {}

}  // namespace cart::cli
