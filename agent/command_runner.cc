#include "agent/command_runner.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "agent/proc.h"
#include "common/base/clock.h"
#include "common/base/errno_status.h"
#include "common/base/spawn.h"

namespace fleet::agent {

std::string FindExecutable(const std::string& name, const std::string& path_var) {
  for (absl::string_view dir : absl::StrSplit(path_var, ':', absl::SkipEmpty())) {
    std::string candidate = absl::StrCat(dir, "/", name);
    struct stat st;
    if (stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
        access(candidate.c_str(), X_OK) == 0) {
      return candidate;
    }
  }
  return "";
}

absl::StatusOr<CommandResult> PosixCommandRunner::Run(const Command& command) {
  if (command.argv.empty()) return absl::InvalidArgumentError("command: empty argv");
  std::string program = command.argv[0];
  if (program.find('/') == std::string::npos) {
    auto path = command.env.find("PATH");
    program = FindExecutable(program, path == command.env.end() ? "" : path->second);
    if (program.empty()) {
      return absl::NotFoundError(absl::StrCat(command.argv[0], ": not found on the PATH given"));
    }
  }
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return ErrnoToStatus(errno, "command: pipe");
  absl::Cleanup close_read = [&] { close(fds[0]); };
  SpawnSpec spec;
  spec.program = program;
  spec.argv = command.argv;
  spec.env = command.env;
  spec.cwd = command.cwd;
  spec.in = SpawnStream::Null();
  spec.out = SpawnStream::Fd(fds[1]);
  spec.err = SpawnStream::Fd(fds[1]);
  spec.group = SpawnGroup::kOwnGroup;
  // Default dispositions and an empty mask in the child, whatever the agent set for itself.
  spec.reset_signals = true;
  const absl::Time start = fleet::SteadyNow();
  const absl::StatusOr<pid_t> spawned = SpawnProcess(spec);
  close(fds[1]);
  if (!spawned.ok()) {
    return absl::Status(spawned.status().code(),
                        absl::StrCat("command: ", spawned.status().message()));
  }
  const pid_t pid = *spawned;

  CommandResult result;
  const absl::Time deadline = start + command.timeout;
  char buffer[16 << 10];
  bool eof = false;
  while (!eof) {
    const int64_t left_ms = absl::ToInt64Milliseconds(deadline - fleet::SteadyNow());
    if (left_ms <= 0) {
      result.timed_out = true;
      kill(-pid, SIGKILL);
      break;
    }
    pollfd p{fds[0], POLLIN, 0};
    const int ready = poll(&p, 1, static_cast<int>(std::min<int64_t>(left_ms, 1 << 30)));
    if (ready < 0) {
      if (errno == EINTR) continue;
      kill(-pid, SIGKILL);
      break;
    }
    if (ready == 0) continue;
    const ssize_t n = read(fds[0], buffer, sizeof(buffer));
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      break;
    }
    if (n == 0) {
      eof = true;
      break;
    }
    result.output_bytes += n;
    result.output.append(buffer, static_cast<size_t>(n));
    if (result.output.size() > 2 * max_output_) {
      result.output.erase(0, result.output.size() - max_output_);
    }
  }
  if (result.output.size() > max_output_) {
    result.output.erase(0, result.output.size() - max_output_);
  }
  // The process group is the unit, signalled and reaped as one. The leader's exit is waited for
  // without reaping it (WNOWAIT): its zombie keeps the group's id from going to another process
  // while what is left of the group (a child that kept the pipe open, a daemonised grandchild) is
  // killed and its members that are the agent's children (it is a subreaper) are reaped, each by
  // its own pid. The leader is reaped last.
  siginfo_t exited{};
  while (waitid(P_PID, static_cast<id_t>(pid), &exited, WEXITED | WNOWAIT) != 0) {
    if (errno != EINTR) return ErrnoToStatus(errno, absl::StrCat("command: wait ", program));
  }
  const pid_t self = getpid();
  for (bool reaped_one = true; reaped_one;) {
    kill(-pid, SIGKILL);
    reaped_one = false;
    for (const SessionProcess& p : ListGroup(pid, "/proc", /*include_zombies=*/true)) {
      if (p.stat.pid == pid || p.stat.ppid != self) continue;
      // Killed a moment ago: this wait is for its death, not for its work.
      while (waitpid(p.stat.pid, nullptr, 0) < 0 && errno == EINTR) {
      }
      reaped_one = true;  // its own children may have become the agent's: look again
    }
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return ErrnoToStatus(errno, absl::StrCat("command: wait ", program));
  }
  result.took = fleet::SteadyNow() - start;
  if (WIFEXITED(status)) {
    result.exited = true;
    result.exit_code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    result.signal = WTERMSIG(status);
  }
  return result;
}

}  // namespace fleet::agent
