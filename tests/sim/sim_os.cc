#include "tests/sim/sim_os.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/base/errno_status.h"
#include "common/base/spawn.h"

extern char** environ;

namespace fleet::sim {
namespace {

// Enough for any --version banner; a tool that floods its output is cut, not waited on forever.
constexpr size_t kMaxToolOutput = 1 << 16;

}  // namespace

Environment Environment::FromProcess() {
  Vars vars;
  for (char** e = environ; *e != nullptr; ++e) {
    const char* eq = std::strchr(*e, '=');
    if (eq == nullptr) continue;
    vars.emplace(std::string(*e, static_cast<size_t>(eq - *e)), std::string(eq + 1));
  }
  return Environment(std::move(vars));
}

std::string Environment::Get(std::string_view name) const {
  auto it = vars_.find(name);
  return it == vars_.end() ? "" : it->second;
}

bool Environment::Has(std::string_view name) const { return vars_.find(name) != vars_.end(); }

std::vector<std::string> Environment::List(std::string_view name) const {
  return absl::StrSplit(Get(name), ':', absl::SkipEmpty());
}

bool IsFile(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

bool IsExecutable(const std::string& path) {
  return IsFile(path) && access(path.c_str(), X_OK) == 0;
}

bool IsDirectory(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

absl::StatusOr<std::string> ReadSmallFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot be read"));
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

std::string FindInDirs(const std::string& name, const std::vector<std::string>& dirs) {
  for (const std::string& dir : dirs) {
    std::string candidate = absl::StrCat(dir, "/", name);
    if (IsFile(candidate)) return candidate;
  }
  return "";
}

std::string FindExecutable(const std::string& name, const std::vector<std::string>& dirs) {
  for (const std::string& dir : dirs) {
    std::string candidate = absl::StrCat(dir, "/", name);
    if (IsExecutable(candidate)) return candidate;
  }
  return "";
}

absl::StatusOr<ToolResult> RunTool(const std::vector<std::string>& argv) {
  if (argv.empty()) return absl::InvalidArgumentError("run: empty argv");
  int pipe_fds[2];
  if (pipe2(pipe_fds, O_CLOEXEC) != 0) return ErrnoToStatus(errno, "run: pipe");
  SpawnSpec spec;
  spec.argv = argv;
  spec.in = SpawnStream::Null();
  spec.out = SpawnStream::Fd(pipe_fds[1]);
  spec.err = SpawnStream::Fd(pipe_fds[1]);
  const absl::StatusOr<pid_t> spawned = SpawnProcess(spec);
  close(pipe_fds[1]);
  if (!spawned.ok()) {
    close(pipe_fds[0]);
    return spawned.status();
  }
  const pid_t pid = *spawned;
  ToolResult result;
  char buf[4096];
  for (;;) {
    const ssize_t n = read(pipe_fds[0], buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    if (result.output.size() < kMaxToolOutput) result.output.append(buf, static_cast<size_t>(n));
  }
  close(pipe_fds[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return ErrnoToStatus(errno, absl::StrCat("wait ", argv[0]));
  }
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

int64_t UnixSeconds() { return static_cast<int64_t>(std::time(nullptr)); }

}  // namespace fleet::sim
