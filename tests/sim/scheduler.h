// The scheduler child of the simulated server, one per tensor-parallel rank, as SGLang forks
// them: it sets up its GPU, loads the weights, captures CUDA graphs and, inside that, has
// flashinfer build its JIT ops, inspecting the container's toolchain and really running the tools
// it finds. It does the steps the launcher sends it, one at a time, and logs to the shared log.
//
// On a failure it logs SGLang's "Scheduler hit an exception: Traceback ..." record and sends
// SIGQUIT to the launcher, as SGLang's scheduler does; the launcher then ends it.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tests/sim/flashinfer_jit.h"
#include "tests/sim/gpu_info.h"
#include "tests/sim/server_args.h"
#include "tests/sim/sim_os.h"
#include "tests/sim/startup_script.h"

namespace fleet::sim {

// The command that is not a script step: the launcher's warm-up request.
inline constexpr int kWarmupCommand = -2;
// Bytes a scheduler answers a command with.
inline constexpr char kStepDone = 'k';

// Everything a scheduler needs, prepared by the launcher before it forks (the child gets a copy).
struct SchedulerSetup {
  int rank = 0;
  pid_t launcher = 0;
  int log_fd = 2;
  ServerArgs args;
  Fault fault = Fault::kNone;
  double speed = 1;
  Environment env;
  std::string site_packages;
  absl::StatusOr<std::vector<GpuInfo>> gpus;
  std::vector<JitOp> ops;
  std::vector<CacheState> cache;
  std::vector<Step> script;
  JitBuild build{"", "", "", ""};
};

// Runs the scheduler in this (forked) process: reads commands (int32 step indexes, or
// kWarmupCommand) from `command_fd`, does each and answers kStepDone on `reply_fd`. Ends the
// process when `command_fd` reaches its end (the launcher closed it or died).
[[noreturn]] void RunScheduler(const SchedulerSetup& setup, int command_fd, int reply_fd);

}  // namespace fleet::sim
