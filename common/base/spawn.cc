#include "common/base/spawn.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <unistd.h>

#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "common/base/errno_status.h"

extern char** environ;

namespace fleet {
namespace {

constexpr const char* kStreamNames[] = {"stdin", "stdout", "stderr"};

// Adds the file action that makes the child's descriptor `target` (0, 1 or 2) what `stream` says.
absl::Status AddStream(posix_spawn_file_actions_t* actions, int target, const SpawnStream& stream,
                       const std::string& program) {
  const std::string what = absl::StrCat("spawn ", program, ": ", kStreamNames[target]);
  int rc = 0;
  switch (stream.kind) {
    case SpawnStream::Kind::kInherit:
      return absl::OkStatus();
    case SpawnStream::Kind::kNull:
      rc = posix_spawn_file_actions_addopen(actions, target, "/dev/null",
                                            target == STDIN_FILENO ? O_RDONLY : O_WRONLY, 0);
      break;
    case SpawnStream::Kind::kFd:
      if (stream.fd < 0) return absl::InvalidArgumentError(absl::StrCat(what, ": no descriptor"));
      rc = posix_spawn_file_actions_adddup2(actions, stream.fd, target);
      break;
    case SpawnStream::Kind::kPath:
      rc = posix_spawn_file_actions_addopen(actions, target, stream.path.c_str(), stream.flags,
                                            stream.mode);
      break;
    case SpawnStream::Kind::kStdout:
      // Only stderr can follow stdout: its action runs after stdout's.
      if (target != STDERR_FILENO) {
        return absl::InvalidArgumentError(absl::StrCat(what, ": only stderr can be stdout"));
      }
      rc = posix_spawn_file_actions_adddup2(actions, STDOUT_FILENO, target);
      break;
  }
  if (rc == EBADF) return absl::InvalidArgumentError(absl::StrCat(what, ": bad descriptor"));
  return ErrnoToStatus(rc, what);
}

}  // namespace

SpawnStream SpawnStream::FileToRead(std::string path) {
  SpawnStream s{Kind::kPath};
  s.path = std::move(path);
  s.flags = O_RDONLY;
  return s;
}

SpawnStream SpawnStream::FileToAppend(std::string path, mode_t mode) {
  SpawnStream s{Kind::kPath};
  s.path = std::move(path);
  s.flags = O_WRONLY | O_CREAT | O_APPEND;
  s.mode = mode;
  return s;
}

absl::StatusOr<pid_t> SpawnProcess(const SpawnSpec& spec) {
  if (spec.argv.empty()) return absl::InvalidArgumentError("spawn: empty argv");
  const std::string& program = spec.program.empty() ? spec.argv[0] : spec.program;

  std::vector<char*> argv;
  argv.reserve(spec.argv.size() + 1);
  for (const std::string& a : spec.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::vector<std::string> env_strings;
  std::vector<char*> envp;
  char** env = environ;
  if (spec.env) {
    env_strings.reserve(spec.env->size());
    for (const auto& [k, v] : *spec.env) env_strings.push_back(absl::StrCat(k, "=", v));
    envp.reserve(env_strings.size() + 1);
    for (const std::string& e : env_strings) envp.push_back(const_cast<char*>(e.c_str()));
    envp.push_back(nullptr);
    env = envp.data();
  }

  posix_spawn_file_actions_t actions;
  if (const int rc = posix_spawn_file_actions_init(&actions); rc != 0) {
    return ErrnoToStatus(rc, absl::StrCat("spawn ", program, ": file actions"));
  }
  absl::Cleanup destroy_actions = [&] { posix_spawn_file_actions_destroy(&actions); };
  // In this order: stderr may follow stdout, and a relative stream path is this process's.
  const SpawnStream* streams[] = {&spec.in, &spec.out, &spec.err};
  for (int target = STDIN_FILENO; target <= STDERR_FILENO; ++target) {
    if (absl::Status s = AddStream(&actions, target, *streams[target], program); !s.ok()) return s;
  }
  if (spec.close_other_fds) {
    if (const int rc = posix_spawn_file_actions_addclosefrom_np(&actions, STDERR_FILENO + 1);
        rc != 0) {
      return ErrnoToStatus(rc, absl::StrCat("spawn ", program, ": closefrom"));
    }
  }
  if (!spec.cwd.empty()) {
    if (const int rc = posix_spawn_file_actions_addchdir_np(&actions, spec.cwd.c_str()); rc != 0) {
      return ErrnoToStatus(rc, absl::StrCat("spawn ", program, ": chdir ", spec.cwd));
    }
  }

  posix_spawnattr_t attr;
  if (const int rc = posix_spawnattr_init(&attr); rc != 0) {
    return ErrnoToStatus(rc, absl::StrCat("spawn ", program, ": attributes"));
  }
  absl::Cleanup destroy_attr = [&] { posix_spawnattr_destroy(&attr); };
  short flags = 0;
  if (spec.reset_signals) {
    sigset_t all, none;
    sigfillset(&all);
    sigemptyset(&none);
    posix_spawnattr_setsigdefault(&attr, &all);
    posix_spawnattr_setsigmask(&attr, &none);
    flags |= POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK;
  }
  switch (spec.group) {
    case SpawnGroup::kInherit:
      break;
    case SpawnGroup::kOwnGroup:
      posix_spawnattr_setpgroup(&attr, 0);
      flags |= POSIX_SPAWN_SETPGROUP;
      break;
    case SpawnGroup::kOwnSession:
      flags |= POSIX_SPAWN_SETSID;
      break;
  }
  posix_spawnattr_setflags(&attr, flags);

  pid_t pid = 0;
  const int rc = spec.search_path
                     ? posix_spawnp(&pid, program.c_str(), &actions, &attr, argv.data(), env)
                     : posix_spawn(&pid, program.c_str(), &actions, &attr, argv.data(), env);
  if (rc != 0) return ErrnoToStatus(rc, absl::StrCat("spawn ", program));
  return pid;
}

}  // namespace fleet
