// The child processes of the simulated `vllm serve` (vLLM V1): EngineCore_DP0 and, with tensor
// parallelism, one worker per rank (Worker_TP0, Worker_TP1, ...). The GPU work (device set-up,
// weights, the profile run that makes flashinfer build its JIT ops, CUDA graph capture) is done by
// the workers, or by EngineCore itself with one GPU (vLLM's UniProcExecutor). Each process does
// the steps the API server sends it (ChildPacer), logs with its own prefix (VllmLog) and answers
// kVllmStepDone, or kVllmStepFailed followed by the exception's message and a newline once it has
// logged the failure. The JIT build and the toolchain checks are the SGLang scheduler's
// (flashinfer_jit.h, toolchain.h); the texts are vLLM's (vllm_tracebacks.h).
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
#include "tests/sim/vllm_tracebacks.h"

namespace fleet::sim {

inline constexpr char kVllmStepDone = 'k';
inline constexpr char kVllmStepFailed = 'f';
// The simulated vLLM release ("vLLM API server version 0.11.0").
inline constexpr char kVllmVersion[] = "0.11.0";

enum class VllmStepKind {
  kEngineInit,    // EngineCore: "Initializing a V1 LLM engine ..."
  kInitDevice,    // GPU processes: driver, visible device
  kLoadModel,     // GPU processes: attention backend chosen, weights loaded
  kWeightShard,   // GPU rank 0 redraws the shards' bar
  kWeightsDone,   // GPU processes: "Model loading took ..."
  kJitOpBegin,    // GPU processes: flashinfer loads op `op` (rank 0 builds it)
  kJitStepDone,   // rank 0: build step `step` of op `op` finished
  kJitLinked,     // GPU processes: op `op` linked and loaded
  kKvMemory,      // GPU processes: "Available KV cache memory: ..."
  kKvCache,       // EngineCore: KV cache sized (or no memory for it)
  kCaptureBegin,  // GPU processes: CUDA graph capture
  kCaptureEnd,    // GPU processes: capture finished (or failed)
  kEngineReady,   // EngineCore: "init engine (profile, create kv cache, warmup model) took ..."
};

struct VllmStep {
  VllmStepKind kind;
  double seconds_after = 0;  // at speed 1
  int op = -1;
  int step = 0;
  // Whether the GPU processes do it (else EngineCore).
  bool OnGpu() const;
  // Whether it runs inside a collective RPC of the workers' busy loop (after they were ready):
  // a failure is "WorkerProc hit an exception.", before it "WorkerProc failed to start.".
  bool InBusyLoop() const;
};

// Everything a child needs, prepared by the API server before it forks (each child gets a copy).
struct VllmSetup {
  ServerArgs args;
  Fault fault = Fault::kNone;
  double speed = 1;
  Environment env;
  std::string site_packages;
  std::string attention_backend;  // VLLM_ATTENTION_BACKEND, "" when unset
  absl::StatusOr<std::vector<GpuInfo>> gpus;
  std::vector<JitOp> ops;
  std::vector<CacheState> cache;
  std::vector<VllmStep> script;
  JitBuild build{"", "", "", ""};
  int log_fd = 2;
};

// The steps of a start for `args`, given the ops flashinfer loads and their cache states.
std::vector<VllmStep> BuildVllmScript(const ServerArgs& args, const std::vector<JitOp>& ops,
                                      const std::vector<CacheState>& cache);

// Commands a child takes besides step indexes: the executor shuts the workers down; a worker whose
// peer failed inside the collective of step I gets kVllmSymptomCommand - I.
inline constexpr int kVllmTerminateCommand = -4;
inline constexpr int kVllmSymptomCommand = -100;

// Where a step's exception would be raised (vllm_tracebacks.h): device, weights, profile, capture.
VllmPhase PhaseOf(const VllmStep& step);

// Runs EngineCore (`rank` -1) or the worker of tensor-parallel rank `rank` in this forked process:
// reads commands from `command_fd` and answers on `reply_fd` until the pipe ends.
[[noreturn]] void RunVllmProcess(const VllmSetup& setup, int rank, int command_fd, int reply_fd);

}  // namespace fleet::sim
