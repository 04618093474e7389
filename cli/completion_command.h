// `fleetctl completion bash`: prints a bash completion script (verbs, each verb's flags, the
// values of -o, and SERVER names asked from fleetd with `fleetctl status -o name`). Load it with
// `source <(fleetctl completion bash)`, or install it as
// /usr/share/bash-completion/completions/fleetctl.
#pragma once

#include <string>
#include <vector>

#include "cli/command_context.h"

namespace fleet::cli {

int RunCompletion(const std::vector<std::string>& args, const CommandContext& ctx);

}  // namespace fleet::cli
