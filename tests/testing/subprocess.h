// Test utilities for running real programs: argv vectors (never a shell string), an explicit
// environment, stdout+stderr to a file, always reaped, exit decoded into code vs. signal. Used by
// the live-tool tests, the simulator tests and the end-to-end tests.
#pragma once

#include <sys/types.h>

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace fleet::testing {

struct RunOptions {
  // The child's whole environment; when unset, the test process's environment.
  std::optional<std::map<std::string, std::string>> env;
  std::string cwd;          // empty: the current directory
  std::string output_path;  // stdout and stderr go here (appended); empty: /dev/null
  std::string stdin_path;   // empty: /dev/null
};

struct RunResult {
  bool exited = false;  // false: killed by `signal`
  int exit_code = -1;
  int signal = 0;
  std::string output;  // the contents of output_path after the run ("" without one)
};

// Starts argv[0] (searched on the child's PATH when it has no '/') in its own process group,
// without waiting. The caller reaps it (waitpid).
absl::StatusOr<pid_t> Spawn(const std::vector<std::string>& argv, const RunOptions& options = {});

// Runs argv[0] to completion (Spawn, then wait).
absl::StatusOr<RunResult> Run(const std::vector<std::string>& argv, const RunOptions& options = {});

// The lines of `text` as views into it, numbered as the classifier numbers them (element 0 is line
// 1); a final line without a newline counts.
std::vector<std::string_view> SplitLines(std::string_view text);

// The test process's environment as a map (to copy and modify for a child).
std::map<std::string, std::string> CurrentEnvironment();

// Path of `name` on `path_var` (a PATH value), or "" when absent.
std::string FindOnPath(const std::string& name, const std::string& path_var);

// A fresh directory under $TEST_TMPDIR or /tmp, removed with its contents on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  // path() + "/" + relative
  std::string Join(const std::string& relative) const;
  // Writes `contents` to Join(relative), creating parent directories.
  void WriteFile(const std::string& relative, const std::string& contents) const;

 private:
  std::string path_;
};

// The whole file, or "" when it cannot be read.
std::string ReadFile(const std::string& path);

// A path inside the build tree: $FLEET_BUILD_DIR/relative, else under the build tree this was
// compiled in.
std::string BuildPath(const std::string& relative);
// A path inside the source tree: $FLEET_SOURCE_DIR/relative, else under the source tree.
std::string SourcePath(const std::string& relative);

}  // namespace fleet::testing
