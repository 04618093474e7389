// fleetd: the gpu-fleet control plane. This build has the command line only; reconciling,
// the SQLite store and the CLI service arrive with the daemon issue.
#include <iostream>
#include <string>
#include <vector>

#include "common/base/flag_set.h"
#include "common/base/version.h"

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  bool version = false;
  std::string config;
  std::string state_dir = "/var/lib/gpu-fleet";
  fleet::FlagSet flags("fleetd [flags]",
                       "The gpu-fleet daemon: reads the fleet config, reaches each container's "
                       "agent, reconciles\ndesired and actual state per server, plans remediation "
                       "and records every attempt in SQLite.");
  flags.AddBool("version", '\0', &version, "print the version and exit");
  flags.AddString("config", '\0', &config, "fleet config (YAML) to load as desired state", "FILE");
  flags.AddString("state-dir", '\0', &state_dir, "database, socket and lock live here", "DIR");
  if (absl::Status s = flags.Parse(args); !s.ok()) {
    std::cerr << "fleetd: " << s.message() << "\n";
    return 1;
  }
  if (flags.help_requested()) {
    std::cout << flags.Help();
    return 0;
  }
  if (version) {
    std::cout << "fleetd " << fleet::kVersion << " (" << fleet::kGitRevision << ")\n";
    return 0;
  }
  std::cerr << "fleetd: the daemon is not in this build yet (the daemon issue adds it)\n";
  return 1;
}
