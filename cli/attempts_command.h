// `fleetctl attempts [SERVER] [-o table|json]`: the history of start attempts fleetd recorded
// (ListAttempts RPC), oldest first as fleetd sends them: outcome, diagnosis class, start time,
// duration, exit, what triggered the attempt, and the diagnosis summary. Returns the exit status.
#pragma once

#include <string>
#include <vector>

#include "cli/command_context.h"
#include "common/base/json_text.h"
#include "proto/fleet.pb.h"

namespace fleet::cli {

int RunAttempts(const std::vector<std::string>& args, const CommandContext& ctx);

// One attempt as the JSON object of docs/cli.md.
Json AttemptJson(const v1::Attempt& attempt);

// "0", "1", "SIGKILL", "unknown" (the server died while the agent was away), "-" (still running).
std::string FormatExit(const v1::Attempt& attempt);

}  // namespace fleet::cli
