// `fleetctl explain FILE... | -`: classifies startup logs with no daemon, one report per file.
// Output goes to `out`, errors to `err`; the return value is the process exit code:
// 0 every file was diagnosed (`unknown` and `none` included), 2 a file could not be read (the
// others are still reported), 1 a usage or catalogue error.
// `explain --server SERVER [--attempt N]` asks fleetd for a stored diagnosis instead
// (cli/server_explain.h) and renders it the same way.
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

#include "cli/command_context.h"

namespace fleet::cli {

// The whole command: ctx.out/err receive the output; ctx names fleetd for --server SERVER.
int RunExplain(const std::vector<std::string>& args, const CommandContext& ctx);

// Files only in practice: --server goes to the default socket.
int RunExplain(const std::vector<std::string>& args, bool stdout_is_tty, std::ostream& out,
               std::ostream& err);

}  // namespace fleet::cli
