// CommandRunner: runs a short-lived program to completion (a toolchain probe such as
// `nvcc --version`, a `pip install`) from an argv vector and an explicit environment, never a
// shell string. Output (stdout and stderr interleaved) is kept bounded: the last `max_output`
// bytes. At the timeout, and when the program ends, what is left of its process group is killed
// and reaped with it (the group is the unit, as for servers). An interface, so the probe
// and the action runner can be tested with a fake.
//
// Thread-safe: Run() may be called from several threads at once.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace fleet::agent {

struct Command {
  std::vector<std::string> argv;           // argv[0] without '/' is searched on env's PATH
  std::map<std::string, std::string> env;  // the program's whole environment
  std::string cwd;                         // empty: the agent's
  absl::Duration timeout = absl::Seconds(60);
};

struct CommandResult {
  bool exited = false;  // false: killed by `signal` (or by the timeout)
  int exit_code = -1;
  int signal = 0;
  bool timed_out = false;
  std::string output;        // the last bytes of stdout+stderr, at most max_output
  int64_t output_bytes = 0;  // all it wrote
  absl::Duration took;

  bool ok() const { return exited && exit_code == 0; }
};

class CommandRunner {
 public:
  virtual ~CommandRunner() = default;
  // NotFound when argv[0] cannot be found; other errors when it cannot be started. A program
  // that runs and fails is an OK status with its exit code.
  virtual absl::StatusOr<CommandResult> Run(const Command& command) = 0;
};

// The real one: posix_spawn, own process group, a pipe for the output, poll() with the deadline.
class PosixCommandRunner : public CommandRunner {
 public:
  explicit PosixCommandRunner(size_t max_output = 64 << 10) : max_output_(max_output) {}
  absl::StatusOr<CommandResult> Run(const Command& command) override;

 private:
  const size_t max_output_;
};

// Path of `name` in the directories of `path_var` (a PATH value) that is an executable file, or
// "" when there is none.
std::string FindExecutable(const std::string& name, const std::string& path_var);

}  // namespace fleet::agent
