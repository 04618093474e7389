// `fleetctl explain --server SERVER [--attempt N] [-o json]`: the diagnosis fleetd stored for an
// attempt (Explain RPC), rendered exactly as `fleetctl explain FILE` renders a log's: the same
// human report and the same JSON object (docs/design.md, "Contracts"), with `file` being `SERVER#N`
// (N the attempt number fleetd answered for; the latest when --attempt is not given).
#pragma once

#include <cstdint>
#include <string>

#include "cli/command_context.h"

namespace fleet::cli {

struct ServerExplainRequest {
  std::string server;
  int64_t attempt = 0;  // 0: the latest
  bool json = false;
  bool color = false;
  bool confidence = false;  // --confidence: the JSON object adds `confidence`
};

// Returns the exit status: 0 shown, 1 a bad name, an unreachable daemon, or fleetd's error
// (unknown server or attempt, no diagnosis stored yet).
int RunServerExplain(const ServerExplainRequest& request, const CommandContext& ctx);

}  // namespace fleet::cli
