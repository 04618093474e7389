// VllmApiServer: the main process of the simulated `vllm serve` (vLLM V1's API server). It logs
// its arguments, checks the model, forks EngineCore_DP0 and, with tensor parallelism, one worker
// per rank (in vLLM the workers are EngineCore's children; here all are the API server's, so one
// ChildPacer paces every step in a deterministic order), sends each step of the start to the
// processes that do it, then binds its port and serves /health, /v1/models and /v1/completions
// until SIGTERM.
//
// A failure goes the way vLLM's does: the failing process's traceback (the root cause); with
// workers, a failure inside a collective leaves the other ranks with a symptom (their all-reduce
// aborted) and EngineCore's "EngineCore failed to start." names the first failed rank's error; the
// workers are told to exit; the API server's "RuntimeError: Engine core initialization failed.
// See root cause above." and exit status 1. EngineCore's record of a worker's failure is written
// here, under EngineCore's prefix and pid, from the error the worker answered with. Every child
// is killed and reaped on every path. Single-threaded; signals arrive through the pacer's
// signalfd.
#pragma once

#include <string>
#include <vector>

#include "tests/sim/child_pacer.h"
#include "tests/sim/http_server.h"
#include "tests/sim/server_args.h"
#include "tests/sim/sim_log.h"
#include "tests/sim/sim_os.h"
#include "tests/sim/startup_script.h"
#include "tests/sim/vllm_engine.h"

namespace fleet::sim {

struct VllmServerConfig {
  ServerArgs args;  // from ParseVllmServeArgs
  Fault fault = Fault::kNone;
  double speed = 1;  // > 0; durations are divided by it
  Environment env;
  std::string venv;  // the directory above bin/vllm
};

class VllmApiServer {
 public:
  explicit VllmApiServer(VllmServerConfig config);
  VllmApiServer(const VllmApiServer&) = delete;
  VllmApiServer& operator=(const VllmApiServer&) = delete;

  // Runs the server to its end and returns the process's exit status.
  int Run();

 private:
  using Exit = ChildPacer::Exit;

  std::string SitePackages() const;
  void Prepare();
  Exit StartProcesses();
  // The pacer's children that do the GPU work: the workers, or EngineCore alone.
  std::vector<int> GpuChildren() const;
  Exit RunStep(int index);
  // The rest of a failed child's answer: str() of its exception.
  std::string FailureMessage(int child);
  // A worker (rank `rank`, tensor parallelism) failed in step `step_index`: the other ranks'
  // symptoms, EngineCore's failure, the workers' exit, the API server's end.
  int WorkerFailed(int rank, const std::string& message, int step_index);
  // Tells workers to exit (their death pipe closes): each logs it.
  void TerminateWorkers(int except_rank);
  // The API server's end when EngineCore did not start: its traceback, exit status 1.
  int EngineStartFailed();
  Exit OnSignal(int signo);
  int ServeHttp();
  HttpResponse Handle(const HttpRequest& request) const;
  std::string ServedModel() const;

  const VllmServerConfig config_;
  const VllmLog log_;
  ChildPacer pacer_;
  VllmSetup setup_;
};

}  // namespace fleet::sim
