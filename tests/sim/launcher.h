// Launcher: the main process of the simulated SGLang server (`python -m sglang.launch_server`).
// It imports (sgl_kernel needs libnvrtc from the loader path), logs its server_args, checks the
// model, forks one scheduler per tensor-parallel rank and paces their startup steps, then runs
// uvicorn's part: binds the port, warms up, logs the ready line and serves HTTP until SIGTERM.
//
// Exit paths, as the real server's: a scheduler's SIGQUIT → "Received sigquit from a child
// process..." and exit 0 (SGLang's sigquit path can exit 0); import, model or bind failure → 1;
// a scheduler that dies without a word → 1; SIGTERM/SIGINT → clean shutdown, 0. Every path kills
// and reaps the schedulers. Single-threaded; signals arrive through a signalfd.
#pragma once

#include <sys/types.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tests/sim/child_pacer.h"
#include "tests/sim/http_server.h"
#include "tests/sim/scheduler.h"
#include "tests/sim/server_args.h"
#include "tests/sim/sim_log.h"
#include "tests/sim/sim_os.h"
#include "tests/sim/startup_script.h"

namespace fleet::sim {

struct LauncherConfig {
  ServerArgs args;
  Fault fault = Fault::kNone;
  double speed = 1;  // > 0; durations are divided by it
  Environment env;   // the server's environment (this process's)
  std::string site_packages;
};

class Launcher {
 public:
  explicit Launcher(LauncherConfig config);
  ~Launcher();
  Launcher(const Launcher&) = delete;
  Launcher& operator=(const Launcher&) = delete;

  // Runs the server to its end and returns the process's exit status.
  int Run();

 private:
  using Exit = ChildPacer::Exit;

  Exit CheckModel();
  void PrepareJit();
  Exit StartSchedulers();
  // Sends command `command` to every rank in turn and waits for each answer.
  Exit RunOnRanks(int32_t command);
  // What a signal means while starting: SIGQUIT (a failed scheduler) and SIGTERM/SIGINT end it.
  Exit OnSignal(int signo);
  Exit RankDied(int rank);
  // uvicorn's part, from binding the port to the end of serving; returns the exit status.
  int ServeHttp();
  HttpResponse Handle(const HttpRequest& request) const;

  const LauncherConfig config_;
  const SimLog log_;
  ChildPacer pacer_;
  SchedulerSetup setup_;
};

}  // namespace fleet::sim
