// fleetctl: the command-line client of gpu-fleet. Parses the verb and hands over to its command.
#include <unistd.h>

#include <iostream>
#include <string>
#include <vector>

#include "cli/explain_command.h"
#include "common/base/version.h"

namespace {

constexpr char kUsage[] =
    "usage: fleetctl [--version] [--help] VERB [flags] [args]\n"
    "\n"
    "Supervises LLM inference servers (SGLang, vLLM), one per GPU, across Proxmox LXC containers.\n"
    "\n"
    "verbs:\n"
    "  explain FILE...|-         name the root cause of a failed start from its log (no daemon)\n"
    "  explain --server SERVER   stored evidence of a server's attempt\n"
    "  deploy [-f FILE]          send a fleet config to fleetd and start what it describes\n"
    "  status [--watch]          servers, states, phases, last diagnosis\n"
    "  logs SERVER [-f]          a server's log, by attempt\n"
    "  attempts [SERVER]         the history of start attempts\n"
    "  plan SERVER               the remediation the planner would apply\n"
    "  apply PLAN_ID             apply a plan (policy mode 'ask')\n"
    "  restart SERVER|--all      restart servers\n"
    "  stop SERVER|--all         stop servers\n"
    "  hosts trust HOST          record a Proxmox host's SSH key after checking it\n"
    "  certs init                create the fleet CA and certificates\n"
    "\n"
    "SERVER is host/ctid/gpuN (pve1/200/gpu3; the local host is 'local').\n"
    "Run 'fleetctl VERB --help' for a verb's flags.\n";

bool IsVerb(const std::string& v) {
  for (const char* known : {"deploy", "status", "logs", "attempts", "plan", "apply", "restart",
                            "stop", "hosts", "certs"}) {
    if (v == known) return true;
  }
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    std::cout << kUsage;
    return args.empty() ? 1 : 0;
  }
  if (args[0] == "--version" || args[0] == "version") {
    std::cout << "fleetctl " << fleet::kVersion << " (" << fleet::kGitRevision << ")\n";
    return 0;
  }
  const std::string verb = args[0];
  args.erase(args.begin());
  if (verb == "explain") {
    return fleet::cli::RunExplain(args, isatty(STDOUT_FILENO) != 0, std::cout, std::cerr);
  }
  if (IsVerb(verb)) {
    std::cerr << "fleetctl " << verb << ": not yet: this verb needs fleetd, which this build does "
              << "not have yet\n";
    return 1;
  }
  std::cerr << "fleetctl: unknown verb '" << verb << "' (see fleetctl --help)\n";
  return 1;
}
