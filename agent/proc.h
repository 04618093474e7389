// Reading /proc: a process's identity (pid + start time, so a reused pid is never mistaken for a
// server that died), its state, and the processes and CPU time of a server's session, which the
// stall detector counts as progress (a busy cicc/nvcc/ptxas is progress even when the log is
// quiet). Plain functions over a /proc root (tests may point it elsewhere). Thread-safe.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace fleet::agent {

struct ProcStat {
  pid_t pid = 0;
  std::string comm;
  char state = '?';  // R S D Z T ...
  pid_t ppid = 0;
  pid_t pgrp = 0;
  pid_t session = 0;
  uint64_t utime = 0;  // clock ticks
  uint64_t stime = 0;
  uint64_t cutime = 0;  // of reaped children
  uint64_t cstime = 0;
  uint64_t start_ticks = 0;  // since boot
};

// /proc/PID/stat, or nullopt when the process does not exist.
std::optional<ProcStat> ReadProcStat(pid_t pid, const std::string& proc_root = "/proc");

// Whether `pid` is alive (not a zombie) and started at `start_ticks`.
bool IsSameLiveProcess(pid_t pid, uint64_t start_ticks, const std::string& proc_root = "/proc");

struct SessionProcess {
  ProcStat stat;
  std::string cmdline;  // arguments joined by spaces, cut at 256 bytes
};

// The processes of session `sid`, leader first: the live ones, and with `include_zombies` also
// those dead but not yet reaped.
std::vector<SessionProcess> ListSession(pid_t sid, const std::string& proc_root = "/proc",
                                        bool include_zombies = false);

// CPU ticks (user + system, including reaped children) of every live process of session `sid`.
uint64_t SessionCpuTicks(pid_t sid, const std::string& proc_root = "/proc");

// The same for process group `pgid`. A server's unit is its process group: the agent signals,
// lists, reaps and counts the CPU time of the group, never of the session (a process that moved
// to a group of its own is out of the agent's reach and not waited for).
std::vector<SessionProcess> ListGroup(pid_t pgid, const std::string& proc_root = "/proc",
                                      bool include_zombies = false);
uint64_t GroupCpuTicks(pid_t pgid, const std::string& proc_root = "/proc");

}  // namespace fleet::agent
