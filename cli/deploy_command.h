// `fleetctl deploy [-f FILE] [--only SERVER]... [--dry-run] [-o table|json]`: reads a fleet
// config (YAML, docs/config.md), checks it here (errors name FILE:LINE and the field, before
// fleetd is even asked), and sends it to fleetd, which stores it as desired state and starts,
// updates or stops servers to match. Prints what changed (or, with --dry-run, what would).
//
// Without -f, fleetd applies the config it holds again: servers that gave up get a new try (after
// their container was fixed by hand, say), nothing else changes. `-f -` reads standard input.
#pragma once

#include <istream>
#include <string>
#include <vector>

#include "cli/command_context.h"

namespace fleet::cli {

int RunDeploy(const std::vector<std::string>& args, const CommandContext& ctx);
// The same, reading `-f -` from `in`.
int RunDeployFrom(const std::vector<std::string>& args, const CommandContext& ctx,
                  std::istream& in);

}  // namespace fleet::cli
