// ChildPacer: the parent side of a simulated server's processes. It forks the children (SGLang's
// schedulers, vLLM's EngineCore and workers), sends each a command (a step of the startup script)
// and waits for its one-byte answer, paces the steps in simulated time, and reacts to signals
// while it waits: SIGTERM, SIGINT, SIGQUIT and SIGCHLD arrive through a signalfd and a policy the
// server gives decides what each means. A child that dies shows as the end of its answer pipe.
// Sending in one process and doing in the others keeps the log order deterministic.
//
// The destructor kills (SIGKILL) and reaps every child still running. Single-threaded.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "absl/status/status.h"

namespace fleet::sim {

class ChildPacer {
 public:
  // nullopt: go on; a value: the server ends with that exit status.
  using Exit = std::optional<int>;
  // What a signal (SIGTERM, SIGINT, SIGQUIT; SIGCHLD never reaches it) means to the server.
  using SignalPolicy = std::function<Exit(int signo)>;

  // `speed` > 0 divides every pause.
  ChildPacer(double speed, SignalPolicy policy);
  ~ChildPacer();
  ChildPacer(const ChildPacer&) = delete;
  ChildPacer& operator=(const ChildPacer&) = delete;

  // Blocks the signals into a signalfd and ignores SIGPIPE (a dead child's pipe says so itself).
  absl::Status SetUpSignals();
  // Forks child number size(): it dies with this process, takes signals the default way, keeps
  // only its own ends of its own pipes, and runs `body(command_fd, reply_fd)`, which must not
  // return.
  absl::Status Fork(const std::function<void(int command_fd, int reply_fd)>& body);

  // Sends `command` to child `child` and waits for its answer, reacting to signals. Sets
  // *answer to the byte it answered, or to 0 when it died without answering.
  Exit Command(int child, int32_t command, char* answer);
  // Waits `seconds` (at speed 1) while reacting to signals.
  Exit Pause(double seconds);
  // Reads one signal from the signalfd and applies the policy (SIGCHLD: go on).
  Exit OnSignal();
  // Reads one signal from the signalfd: its number, or nullopt.
  std::optional<int> ReadSignal();

  // Reaps child `child` (waiting for it) and returns its exit code, or -SIGNAL.
  int Reap(int child);
  // SIGKILL to every child still running, then each reaped; their pipes closed.
  void StopAll();

  int signal_fd() const { return signal_fd_; }
  int size() const { return static_cast<int>(children_.size()); }
  pid_t pid(int child) const { return children_[static_cast<size_t>(child)].pid; }
  int reply_fd(int child) const { return children_[static_cast<size_t>(child)].reply_fd; }

 private:
  struct Child {
    pid_t pid = -1;
    int command_fd = -1;
    int reply_fd = -1;
  };

  const double speed_;
  const SignalPolicy policy_;
  const pid_t parent_;
  int signal_fd_ = -1;
  std::vector<Child> children_;
};

// The child side: the next command from `command_fd`, or nullopt at the end of the pipe (the
// parent closed it or died) or after `timeout_ms` (-1: no timeout).
std::optional<int32_t> ReadPacedCommand(int command_fd, int timeout_ms);

}  // namespace fleet::sim
