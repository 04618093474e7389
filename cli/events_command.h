// `fleetctl events [-f] [--since N] [-o table|json]`: the fleet's events (docs/cli.md "events"),
// the ones fleetd recorded after index N (default: all it keeps), then with -f each as it is
// recorded. -o json writes one object per line (JSON Lines; docs/observability.md has the
// fields), to resume from with --since the last line's "index". A position older than the oldest
// kept is said once (a `{"resync": true, "oldest": M}` line in JSON, a note on stderr in the
// table) and the stream goes on from M. Returns the exit status.
#pragma once

#include <string>
#include <vector>

#include "cli/command_context.h"

namespace fleet::cli {

int RunEvents(const std::vector<std::string>& args, const CommandContext& ctx);

}  // namespace fleet::cli
