// The simulated server's contact with its operating system: its environment, the files of the
// container tree it inspects, and the tools it runs (nvcc, ptxas, ninja, nvidia-smi) as real
// child processes with argv vectors, the way Python's subprocess would.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace fleet::sim {

// A process environment (name → value). Immutable after construction; safe to share.
class Environment {
 public:
  using Vars = std::map<std::string, std::string, std::less<>>;

  Environment() = default;
  explicit Environment(Vars vars) : vars_(std::move(vars)) {}
  // This process's environment.
  static Environment FromProcess();

  // The value, or "" when unset.
  std::string Get(std::string_view name) const;
  bool Has(std::string_view name) const;
  // A ':'-separated list variable (PATH, LD_LIBRARY_PATH), empty entries dropped.
  std::vector<std::string> List(std::string_view name) const;

 private:
  Vars vars_;
};

// Whether `path` names an existing regular file (symbolic links followed).
bool IsFile(const std::string& path);
// Whether `path` is a regular file this process may execute.
bool IsExecutable(const std::string& path);
bool IsDirectory(const std::string& path);
// The file's contents, or NotFound.
absl::StatusOr<std::string> ReadSmallFile(const std::string& path);

// The first `dir/name` that is a file, or "" (the dynamic loader's and the linker's search).
std::string FindInDirs(const std::string& name, const std::vector<std::string>& dirs);
// The first executable `dir/name` on `dirs` (a PATH search), or "".
std::string FindExecutable(const std::string& name, const std::vector<std::string>& dirs);

// Seconds since the epoch (the "created" field of OpenAI-style answers).
int64_t UnixSeconds();

struct ToolResult {
  int exit_code = -1;  // -1: killed by a signal
  std::string output;  // stdout and stderr together, bounded
};

// Runs argv (argv[0] a path) to completion with this process's environment, stdout and stderr
// captured. NotFound / PermissionDenied when it cannot be started (Python's FileNotFoundError /
// PermissionError).
absl::StatusOr<ToolResult> RunTool(const std::vector<std::string>& argv);

}  // namespace fleet::sim
