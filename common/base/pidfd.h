// pidfd_open(2) and pidfd_send_signal(2), which glibc 2.36 wraps but the agent's oldest
// containers' headers may not name: the raw system calls (Linux 5.3 or later). Both return -1 and
// set errno on failure. A signal sent through a pidfd can never reach a process that reused the
// pid, which is why the agent signals its servers this way.
#pragma once

#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>

namespace fleet {

inline int PidfdOpen(pid_t pid) { return static_cast<int>(syscall(SYS_pidfd_open, pid, 0)); }

inline int PidfdSendSignal(int pidfd, int sig) {
  return static_cast<int>(syscall(SYS_pidfd_send_signal, pidfd, sig, nullptr, 0));
}

}  // namespace fleet
