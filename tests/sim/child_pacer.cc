#include "tests/sim/child_pacer.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>

#include "common/base/errno_status.h"

namespace fleet::sim {
namespace {

bool WriteCommand(int fd, int32_t command) {
  ssize_t n = 0;
  while ((n = write(fd, &command, sizeof(command))) < 0 && errno == EINTR) {
  }
  return n == static_cast<ssize_t>(sizeof(command));
}

}  // namespace

ChildPacer::ChildPacer(double speed, SignalPolicy policy)
    : speed_(speed), policy_(std::move(policy)), parent_(getpid()) {}

ChildPacer::~ChildPacer() {
  StopAll();
  if (signal_fd_ >= 0) close(signal_fd_);
}

absl::Status ChildPacer::SetUpSignals() {
  sigset_t set;
  sigemptyset(&set);
  for (int sig : {SIGTERM, SIGINT, SIGQUIT, SIGCHLD}) sigaddset(&set, sig);
  if (sigprocmask(SIG_BLOCK, &set, nullptr) != 0) return ErrnoToStatus(errno, "sigprocmask");
  signal_fd_ = signalfd(-1, &set, SFD_CLOEXEC);
  if (signal_fd_ < 0) return ErrnoToStatus(errno, "signalfd");
  signal(SIGPIPE, SIG_IGN);
  return absl::OkStatus();
}

absl::Status ChildPacer::Fork(const std::function<void(int command_fd, int reply_fd)>& body) {
  int command[2], reply[2];
  if (pipe2(command, O_CLOEXEC) != 0) return ErrnoToStatus(errno, "pipe");
  if (pipe2(reply, O_CLOEXEC) != 0) {
    const int err = errno;
    close(command[0]);
    close(command[1]);
    return ErrnoToStatus(err, "pipe");
  }
  const pid_t pid = fork();
  if (pid < 0) {
    const int err = errno;
    for (int fd : {command[0], command[1], reply[0], reply[1]}) close(fd);
    return ErrnoToStatus(err, "fork");
  }
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent_) _exit(1);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    signal(SIGPIPE, SIG_DFL);
    close(signal_fd_);
    for (const Child& c : children_) {
      close(c.command_fd);
      close(c.reply_fd);
    }
    close(command[1]);
    close(reply[0]);
    body(command[0], reply[1]);
    _exit(1);
  }
  close(command[0]);
  close(reply[1]);
  children_.push_back({pid, command[1], reply[0]});
  return absl::OkStatus();
}

ChildPacer::Exit ChildPacer::Command(int child, int32_t command, char* answer) {
  *answer = 0;
  const Child& c = children_.at(static_cast<size_t>(child));
  if (!WriteCommand(c.command_fd, command)) return std::nullopt;
  for (;;) {
    pollfd fds[2] = {{signal_fd_, POLLIN, 0}, {c.reply_fd, POLLIN, 0}};
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return 1;
    }
    // A failing child logs, then may signal: the signal decides before its pipe's state.
    if (fds[0].revents & POLLIN) {
      if (Exit e = OnSignal()) return e;
      continue;
    }
    if (fds[1].revents != 0) {
      char byte = 0;
      if (read(c.reply_fd, &byte, 1) == 1) *answer = byte;
      return std::nullopt;
    }
  }
}

ChildPacer::Exit ChildPacer::Pause(double seconds) {
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(seconds / speed_));
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return std::nullopt;
    pollfd p{signal_fd_, POLLIN, 0};
    const int rc = poll(&p, 1, static_cast<int>(left));
    if (rc < 0 && errno != EINTR) return 1;
    if (rc > 0) {
      if (Exit e = OnSignal()) return e;
    }
  }
}

std::optional<int> ChildPacer::ReadSignal() {
  signalfd_siginfo info{};
  if (read(signal_fd_, &info, sizeof(info)) != static_cast<ssize_t>(sizeof(info))) {
    return std::nullopt;
  }
  return static_cast<int>(info.ssi_signo);
}

ChildPacer::Exit ChildPacer::OnSignal() {
  const std::optional<int> signo = ReadSignal();
  // SIGCHLD: a dead child shows as the end of its pipe.
  if (!signo || *signo == SIGCHLD) return std::nullopt;
  return policy_(*signo);
}

int ChildPacer::Reap(int child) {
  Child& c = children_.at(static_cast<size_t>(child));
  if (c.pid <= 0) return 0;
  int status = 0;
  while (waitpid(c.pid, &status, 0) < 0 && errno == EINTR) {
  }
  c.pid = -1;
  return WIFSIGNALED(status) ? -WTERMSIG(status) : WEXITSTATUS(status);
}

void ChildPacer::StopAll() {
  for (Child& c : children_) {
    if (c.pid > 0) {
      kill(c.pid, SIGKILL);
      while (waitpid(c.pid, nullptr, 0) < 0 && errno == EINTR) {
      }
      c.pid = -1;
    }
    if (c.command_fd >= 0) close(c.command_fd);
    if (c.reply_fd >= 0) close(c.reply_fd);
    c.command_fd = c.reply_fd = -1;
  }
}

std::optional<int32_t> ReadPacedCommand(int command_fd, int timeout_ms) {
  pollfd p{command_fd, POLLIN, 0};
  int rc = 0;
  while ((rc = poll(&p, 1, timeout_ms)) < 0 && errno == EINTR) {
  }
  if (rc <= 0) return std::nullopt;
  int32_t command = 0;
  ssize_t n = 0;
  while ((n = read(command_fd, &command, sizeof(command))) < 0 && errno == EINTR) {
  }
  if (n != static_cast<ssize_t>(sizeof(command))) return std::nullopt;
  return command;
}

}  // namespace fleet::sim
