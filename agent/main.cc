// fleet-agent: runs inside each container, one inference server per GPU. This build has the
// command line only; launching, log following and probing arrive with the agent issue.
#include <iostream>
#include <string>
#include <vector>

#include "common/base/flag_set.h"
#include "common/base/version.h"

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  bool version = false;
  std::string listen = "127.0.0.1:0";
  std::string state_dir = "/var/lib/gpu-fleet-agent";
  fleet::FlagSet flags(
      "fleet-agent [flags]",
      "The gpu-fleet agent: runs inside a container, launches one inference server "
      "per GPU,\nfollows its log, diagnoses failed starts, probes the CUDA "
      "toolchain and applies typed fixes.");
  flags.AddBool("version", '\0', &version, "print the version and exit");
  flags.AddString("listen", '\0', &listen, "gRPC address to serve agent.proto on", "ADDR");
  flags.AddString("state-dir", '\0', &state_dir, "where the agent keeps what it runs", "DIR");
  if (absl::Status s = flags.Parse(args); !s.ok()) {
    std::cerr << "fleet-agent: " << s.message() << "\n";
    return 1;
  }
  if (flags.help_requested()) {
    std::cout << flags.Help();
    return 0;
  }
  if (version) {
    std::cout << "fleet-agent " << fleet::kVersion << " (" << fleet::kGitRevision << ")\n";
    return 0;
  }
  std::cerr << "fleet-agent: serving is not in this build yet (the agent issue adds it)\n";
  return 1;
}
