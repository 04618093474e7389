#include "agent/process_launcher.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "agent/command_runner.h"
#include "agent/proc.h"
#include "common/base/errno_status.h"
#include "common/base/pidfd.h"
#include "common/base/spawn.h"

namespace fleet::agent {

absl::StatusOr<ServerProcess> PosixProcessLauncher::Launch(const ServerCommand& command) {
  if (command.argv.empty()) return absl::InvalidArgumentError("launch: empty argv");
  std::string program = command.argv[0];
  if (program.find('/') == std::string::npos) {
    auto path = command.env.find("PATH");
    program = FindExecutable(program, path == command.env.end() ? "" : path->second);
    if (program.empty()) {
      return absl::NotFoundError(
          absl::StrCat("launch: ", command.argv[0], ": not found on the server's PATH"));
    }
  }
  std::error_code ec;
  const std::filesystem::path log(command.log_path);
  if (log.has_parent_path()) std::filesystem::create_directories(log.parent_path(), ec);
  if (ec) {
    return absl::PermissionDeniedError(
        absl::StrCat("launch: log directory ", log.parent_path().string(), ": ", ec.message()));
  }
  UniqueFd log_fd(open(command.log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644));
  if (!log_fd.valid()) return ErrnoToStatus(errno, absl::StrCat("launch: log ", command.log_path));

  SpawnSpec spec;
  spec.program = program;
  spec.argv = command.argv;
  spec.env = command.env;
  spec.cwd = command.cwd;
  spec.in = SpawnStream::Null();
  spec.out = SpawnStream::Fd(log_fd.get());
  spec.err = SpawnStream::Fd(log_fd.get());
  spec.group = SpawnGroup::kOwnSession;
  spec.reset_signals = true;
  const absl::StatusOr<pid_t> spawned = SpawnProcess(spec);
  if (!spawned.ok()) {
    return absl::Status(spawned.status().code(),
                        absl::StrCat("launch: ", spawned.status().message()));
  }
  const pid_t pid = *spawned;

  ServerProcess p;
  p.pid = pid;
  p.pidfd = UniqueFd(PidfdOpen(pid));
  if (!p.pidfd.valid()) {
    const int err = errno;
    kill(-pid, SIGKILL);
    waitpid(pid, nullptr, 0);
    return ErrnoToStatus(err, "launch: pidfd_open");
  }
  // The child exists until we reap it, so its /proc entry is there to read.
  const std::optional<ProcStat> stat = ReadProcStat(pid);
  p.start_ticks = stat ? stat->start_ticks : 0;
  return p;
}

absl::StatusOr<UniqueFd> OpenPidfd(pid_t pid, uint64_t start_ticks) {
  UniqueFd fd(PidfdOpen(pid));
  if (!fd.valid()) return ErrnoToStatus(errno, absl::StrCat("pidfd_open ", pid));
  // Checked after opening: the pidfd pins the pid, so the process seen now is the one it refers to.
  if (!IsSameLiveProcess(pid, start_ticks)) {
    return absl::NotFoundError(absl::StrCat("process ", pid, " is gone or another process"));
  }
  return fd;
}

absl::Status SignalServerGroup(pid_t leader, uint64_t start_ticks, int pidfd, int sig,
                               const std::string& proc_root) {
  if (leader <= 1) {
    return absl::InvalidArgumentError(absl::StrCat("signal: bad server group ", leader));
  }
  // A zombie counts: until it is reaped its pid (and the group's id) is still the server's.
  const std::optional<ProcStat> stat = ReadProcStat(leader, proc_root);
  if (!stat || stat->start_ticks != start_ticks) {
    return absl::FailedPreconditionError(
        absl::StrCat("signal: server group ", leader, ": its leader is gone or pid ", leader,
                     " is another process now (started at tick ", stat ? stat->start_ticks : 0,
                     ", not ", start_ticks, "); nothing signalled"));
  }
  if (pidfd >= 0 && PidfdSendSignal(pidfd, sig) != 0) {
    if (errno == ESRCH) {
      return absl::FailedPreconditionError(absl::StrCat(
          "signal: server group ", leader, ": its leader was reaped; nothing signalled"));
    }
    return ErrnoToStatus(errno, absl::StrCat("signal: server ", leader, " (pidfd)"));
  }
  if (kill(-leader, sig) != 0 && errno != ESRCH) {
    return ErrnoToStatus(errno, absl::StrCat("signal: server group ", leader));
  }
  return absl::OkStatus();
}

}  // namespace fleet::agent
