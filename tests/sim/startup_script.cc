#include "tests/sim/startup_script.h"

#include "absl/strings/str_cat.h"

namespace fleet::sim {
namespace {

constexpr double kInitSeconds = 1.0;
constexpr double kWeightsSeconds = 10.0;
constexpr double kMemoryPoolSeconds = 1.0;
constexpr double kCaptureSeconds = 5.0;  // the part of capture that is not JIT

}  // namespace

absl::StatusOr<Fault> ParseFault(const std::string& text) {
  if (text.empty()) return Fault::kNone;
  if (text == "oom") return Fault::kOom;
  if (text == "nccl") return Fault::kNccl;
  if (text == "hang_jit") return Fault::kHangJit;
  if (text == "watchdog") return Fault::kWatchdog;
  if (text == "leftover") return Fault::kLeftover;
  if (text == "graph_capture") return Fault::kGraphCapture;
  return absl::InvalidArgumentError(
      absl::StrCat("FLEET_SIM_FAULT: unknown fault '", text,
                   "' (oom, nccl, hang_jit, watchdog, leftover, graph_capture)"));
}

std::vector<Step> BuildStartupScript(const ServerArgs& args, const std::vector<JitOp>& ops,
                                     const std::vector<CacheState>& cache) {
  const bool graphs = !args.disable_cuda_graph;
  std::vector<Step> script = {
      {StepKind::kInitDistributed, kInitSeconds},
      {StepKind::kLoadWeights, kWeightsSeconds / kWeightShards},
  };
  for (int shard = 1; shard <= kWeightShards; ++shard) {
    script.push_back({StepKind::kWeightShard,
                      shard < kWeightShards ? kWeightsSeconds / kWeightShards : 0, -1, shard});
  }
  script.push_back({StepKind::kWeightsLoaded, kMemoryPoolSeconds});
  // Without CUDA graphs the JIT ops are built by the warm-up's first forward pass instead.
  if (graphs) script.push_back({StepKind::kCaptureBegin, kCaptureSeconds * 0.4});
  for (int i = 0; i < static_cast<int>(ops.size()); ++i) {
    if (cache[static_cast<size_t>(i)] != CacheState::kMissing) {
      script.push_back({StepKind::kJitOpBegin, kJitLoadSeconds, i});
      continue;
    }
    script.push_back({StepKind::kJitOpBegin, kJitStepSeconds, i});
    for (int step = 1; step < ops[static_cast<size_t>(i)].StepCount(); ++step) {
      script.push_back({StepKind::kJitStepDone, kJitStepSeconds, i, step});
    }
    script.push_back({StepKind::kJitLinked, kJitLoadSeconds, i});
  }
  if (graphs) {
    script.push_back({StepKind::kPause, kCaptureSeconds * 0.6});
    script.push_back({StepKind::kCaptureEnd, 0.5});
  }
  script.push_back({StepKind::kReady, 0});
  return script;
}

}  // namespace fleet::sim
