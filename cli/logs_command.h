// `fleetctl logs SERVER [-f] [--attempt N] [--tail N]`: a server's log as fleetd serves it (Logs
// RPC), written to standard output byte for byte (logs need not be UTF-8; nothing is decoded,
// re-encoded or coloured). -f keeps following the log until interrupted or until fleetd ends the
// stream. Returns the exit status.
#pragma once

#include <string>
#include <vector>

#include "cli/command_context.h"

namespace fleet::cli {

int RunLogs(const std::vector<std::string>& args, const CommandContext& ctx);

}  // namespace fleet::cli
