#include "cli/later_verbs.h"

#include <ostream>

#include "cli/command_errors.h"

namespace fleet::cli {

bool IsLaterVerb(std::string_view verb) { return verb == "hosts"; }

int RunLaterVerb(std::string_view verb, const std::vector<std::string>& args, std::ostream& err) {
  // `hosts trust HOST`: name the sub-verb the user typed.
  const std::string sub = args.empty() ? "" : " " + args[0];
  err << "fleetctl " << verb << sub << ": not yet: issue 6 (SSH reach to Proxmox hosts)\n";
  return kExitError;
}

}  // namespace fleet::cli
