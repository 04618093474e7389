// Launching inference servers. A server is the agent's child in a session of its own (setsid), so
// the server and every process it starts form one process group (the unit the agent signals,
// lists and reaps as a whole: never the session), and it outlives an agent restart. It gets an
// explicit environment and working directory, stdin from /dev/null, and stdout+stderr appended to
// its log *file* (never a pipe to the agent). Identity is pid + start time, so a reused pid is
// never mistaken for the server. A pidfd (readable when the process exits) lets one event loop wait
// on servers it started and servers it re-adopted alike.
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

// Sends `sig` to the process group of the server whose leader is (`leader`, `start_ticks`), only
// after checking, right before, that `leader` is still that very process: alive, or a zombie not
// yet reaped (either way its pid, and so the group's id, cannot have been given to another
// process). With a pidfd (-1: none) the leader is signalled through it, which can reach no other
// process, and a leader reaped since the check stops the group signal. FailedPrecondition, and
// nothing signalled, when the leader is gone or its pid belongs to another process now (after a
// reboot, or once a server that was not the agent's child has been reaped by another parent):
// such a group's id may be anyone's.
//
// The one window left: a leader that is not the agent's child (re-adopted) reaped by its parent
// and its pid reused as a group id between the pidfd signal and the group signal (two system
// calls apart). A leader that is the agent's child stays a zombie until the agent reaps it, so
// for it there is no window.
absl::Status SignalServerGroup(pid_t leader, uint64_t start_ticks, int pidfd, int sig,
                               const std::string& proc_root = "/proc");

}  // namespace fleet::agent
