// `fleetctl explain FILE... | -`: classifies startup logs with no daemon, one report per file.
// Output goes to `out`, errors to `err`; the return value is the process exit code:
// 0 every file was diagnosed (`unknown` and `none` included), 2 a file could not be read (the
// others are still reported), 1 a usage or catalogue error.
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

namespace fleet::cli {

int RunExplain(const std::vector<std::string>& args, bool stdout_is_tty, std::ostream& out,
               std::ostream& err);

}  // namespace fleet::cli
