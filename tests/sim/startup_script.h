// The startup of the simulated server as a list of steps, the same in the launcher (which paces
// them and sends each to every scheduler rank in turn) and in the schedulers (which do them: log
// their lines, inspect the toolchain, fail). Pacing in one process and doing in the others keeps
// the log order deterministic whatever the number of ranks. Durations are those of a real start
// at speed 1 (about 50 s with a cold JIT cache), divided by the speed factor when waited.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tests/sim/flashinfer_jit.h"
#include "tests/sim/server_args.h"

namespace fleet::sim {

// A JIT op's timing, the same for both simulated engines: one nvcc or link step, and loading a
// built library.
inline constexpr double kJitStepSeconds = 3.0;
inline constexpr double kJitLoadSeconds = 0.3;

// Faults injected through FLEET_SIM_FAULT, for the negative tests.
enum class Fault {
  kNone,
  kOom,       // torch.OutOfMemoryError during CUDA graph capture
  kNccl,      // NCCL fails while the process group is set up
  kHangJit,   // the first JIT compile step never ends; the scheduler keeps using a little CPU
  kWatchdog,  // the scheduler's watchdog fires a while after the server is ready
  // The scheduler leaves the launcher's process group (same session) and outlives a launcher
  // killed with SIGKILL, still holding its GPU memory: a leftover the next launch must reclaim.
  kLeftover,
  // vLLM: CUDA graph capture fails in the last tensor-parallel rank (--enforce-eager avoids it).
  kGraphCapture,
};

// "" or one of oom, nccl, hang_jit, watchdog, leftover, graph_capture; InvalidArgument for
// anything else.
absl::StatusOr<Fault> ParseFault(const std::string& text);

enum class StepKind {
  kPause,            // nothing to do: the launcher only waits
  kInitDistributed,  // GPU and NCCL set-up
  kLoadWeights,      // weights start loading
  kWeightShard,      // shard `step` of the weights is in (rank 0 redraws tqdm's bar)
  kWeightsLoaded,    // weights in, KV cache allocated, attention backend chosen
  kCaptureBegin,     // CUDA graph capture starts
  kJitOpBegin,       // flashinfer loads op `op`: from the cache, or by starting its build
  kJitStepDone,      // build step `step` of op `op` finished (compiles)
  kJitLinked,        // the link step of op `op` finished
  kCaptureEnd,       // CUDA graph capture ends
  kReady,            // the scheduler reports its memory budget and is ready
};

struct Step {
  StepKind kind;
  double seconds_after = 0;  // at speed 1
  int op = -1;               // kJit*: index into the ops
  int step = 0;              // kJitStepDone: 1-based ninja step that finished
};

// The simulated model's checkpoint shards (safetensors files): an 8B model's four.
inline constexpr int kWeightShards = 4;

// Seconds the launcher spends before its first record (Python imports) and in uvicorn's start.
inline constexpr double kImportSeconds = 1.5;
inline constexpr double kUvicornSeconds = 1.0;

// The schedulers' steps for `args`, given the ops to load and their cache states.
std::vector<Step> BuildStartupScript(const ServerArgs& args, const std::vector<JitOp>& ops,
                                     const std::vector<CacheState>& cache);

}  // namespace fleet::sim
