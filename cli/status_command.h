// `fleetctl status [SERVER...] [-o table|wide|json|name] [--watch] [--until-ready]`: fleetd's
// per-server table. --watch follows it (Watch RPC): on a terminal a table redrawn in place, else
// one line per change (JSON Lines with -o json). --until-ready ends when every server is READY
// (exit 0) or one gave up (exit 2); without --watch it prints only the final table.
// Returns the exit status (docs/cli.md); output to ctx.out, errors to ctx.err.
#pragma once

#include <string>
#include <vector>

#include "cli/command_context.h"

namespace fleet::cli {

int RunStatus(const std::vector<std::string>& args, const CommandContext& ctx);

}  // namespace fleet::cli
