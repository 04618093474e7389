// `fleetctl restart SERVER...|--all [--now]` and `fleetctl stop SERVER...|--all`: ask fleetd to
// restart or stop servers (Restart/Stop RPCs) and print the servers it acted on, with their state
// after the request. --now restarts without the canary and the backoff. Returns the exit status.
#pragma once

#include <string>
#include <vector>

#include "cli/command_context.h"

namespace fleet::cli {

int RunRestart(const std::vector<std::string>& args, const CommandContext& ctx);
int RunStop(const std::vector<std::string>& args, const CommandContext& ctx);

}  // namespace fleet::cli
