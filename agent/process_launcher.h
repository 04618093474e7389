// Launching inference servers. A server is the agent's child in a session of its own (setsid), so
// the server and every process it starts form one group the agent signals as a whole, and it
// outlives an agent restart. It gets an explicit environment and working directory, stdin from
// /dev/null, and stdout+stderr appended to its log *file* (never a pipe to the agent). Identity is
// pid + start time, so a reused pid is never mistaken for the server. A pidfd (readable when the
// process exits) lets one event loop wait on servers it started and servers it re-adopted alike.
//
// ProcessLauncher is the seam; PosixProcessLauncher the real one. Thread-safe.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/base/unique_fd.h"

namespace fleet::agent {

struct ServerCommand {
  std::vector<std::string> argv;  // argv[0] without '/' is searched on env's PATH
  std::map<std::string, std::string> env;
  std::string cwd;
  std::string log_path;  // created if missing (with its directory), appended to
};

struct ServerProcess {
  pid_t pid = 0;  // also the session and process-group id
  uint64_t start_ticks = 0;
  UniqueFd pidfd;  // readable once the process has exited
};

class ProcessLauncher {
 public:
  virtual ~ProcessLauncher() = default;
  virtual absl::StatusOr<ServerProcess> Launch(const ServerCommand& command) = 0;
};

class PosixProcessLauncher : public ProcessLauncher {
 public:
  absl::StatusOr<ServerProcess> Launch(const ServerCommand& command) override;
};

// A pidfd for a process the agent did not start (re-adopted after a restart): NotFound when it is
// gone or its start time differs.
absl::StatusOr<UniqueFd> OpenPidfd(pid_t pid, uint64_t start_ticks);

// Sends `sig` to the whole process group of a server; OK when the group is already gone.
absl::Status SignalGroup(pid_t pgid, int sig);

}  // namespace fleet::agent
