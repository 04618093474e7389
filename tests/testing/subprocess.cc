#include "tests/testing/subprocess.h"

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/base/errno_status.h"
#include "common/base/spawn.h"

extern char** environ;

namespace fleet::testing {

std::map<std::string, std::string> CurrentEnvironment() {
  std::map<std::string, std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const char* eq = std::strchr(*e, '=');
    if (eq == nullptr) continue;
    env.emplace(std::string(*e, static_cast<size_t>(eq - *e)), std::string(eq + 1));
  }
  return env;
}

std::string FindOnPath(const std::string& name, const std::string& path_var) {
  for (absl::string_view dir : absl::StrSplit(path_var, ':', absl::SkipEmpty())) {
    std::string candidate = absl::StrCat(dir, "/", name);
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

absl::StatusOr<pid_t> Spawn(const std::vector<std::string>& argv, const RunOptions& options) {
  if (argv.empty()) return absl::InvalidArgumentError("spawn: empty argv");
  const std::map<std::string, std::string> env = options.env ? *options.env : CurrentEnvironment();
  std::string program = argv[0];
  if (program.find('/') == std::string::npos) {
    auto it = env.find("PATH");
    program = FindOnPath(program, it == env.end() ? "/usr/bin:/bin" : it->second);
    if (program.empty()) {
      return absl::NotFoundError(absl::StrCat("spawn: ", argv[0], ": not on PATH"));
    }
  }
  SpawnSpec spec;
  spec.program = program;
  spec.argv = argv;
  spec.env = env;
  spec.cwd = options.cwd;
  spec.in = SpawnStream::FileToRead(options.stdin_path.empty() ? "/dev/null" : options.stdin_path);
  spec.out =
      SpawnStream::FileToAppend(options.output_path.empty() ? "/dev/null" : options.output_path);
  spec.err = SpawnStream::Stdout();
  spec.group = SpawnGroup::kOwnGroup;
  return SpawnProcess(spec);
}

absl::StatusOr<RunResult> Run(const std::vector<std::string>& argv, const RunOptions& options) {
  absl::StatusOr<pid_t> pid = Spawn(argv, options);
  if (!pid.ok()) return pid.status();
  int status = 0;
  while (waitpid(*pid, &status, 0) < 0) {
    if (errno != EINTR) return ErrnoToStatus(errno, absl::StrCat("wait ", argv[0]));
  }
  RunResult result;
  if (WIFEXITED(status)) {
    result.exited = true;
    result.exit_code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    result.signal = WTERMSIG(status);
  }
  if (!options.output_path.empty()) result.output = ReadFile(options.output_path);
  return result;
}

std::vector<std::string_view> SplitLines(std::string_view text) {
  std::vector<std::string_view> lines;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    lines.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return lines;
}

TempDir::TempDir() {
  const char* base = std::getenv("TEST_TMPDIR");
  std::string templ = absl::StrCat(base != nullptr && *base ? base : "/tmp", "/fleet-test-XXXXXX");
  char* made = mkdtemp(templ.data());
  if (made == nullptr) {
    std::fprintf(stderr, "mkdtemp %s: %s\n", templ.c_str(), std::strerror(errno));
    std::abort();
  }
  path_ = made;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

std::string TempDir::Join(const std::string& relative) const {
  return absl::StrCat(path_, "/", relative);
}

void TempDir::WriteFile(const std::string& relative, const std::string& contents) const {
  const std::filesystem::path p(Join(relative));
  std::filesystem::create_directories(p.parent_path());
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f << contents;
}

std::string ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return "";
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// The environment (set by ctest) wins, so a test binary copied elsewhere can be pointed at a
// tree; the trees it was built from are the fallback.
std::string BuildPath(const std::string& relative) {
  const char* dir = std::getenv("FLEET_BUILD_DIR");
  return absl::StrCat(dir != nullptr && *dir ? dir : FLEET_TESTING_BUILD_DIR, "/", relative);
}

std::string SourcePath(const std::string& relative) {
  const char* dir = std::getenv("FLEET_SOURCE_DIR");
  return absl::StrCat(dir != nullptr && *dir ? dir : FLEET_TESTING_SOURCE_DIR, "/", relative);
}

}  // namespace fleet::testing
