#include "tests/sim/vllm_engine.h"

#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "tests/sim/child_pacer.h"
#include "tests/sim/sim_log.h"
#include "tests/sim/toolchain.h"
#include "tests/sim/tracebacks.h"
#include "tests/sim/vllm_tracebacks.h"

namespace fleet::sim {
namespace {

constexpr double kWeightsGib = 0.05;                // the tiny model's weights
constexpr double kNonTorchGib = 1.09;               // CUDA context, NCCL buffers
constexpr double kActivationGib = 0.74;             // the profile run's peak activations
constexpr double kGraphGib = 0.45;                  // CUDA graphs' pool
constexpr int kBytesPerToken = 2 * 2 * 4 * 64 * 2;  // 2 layers x (K, V) x 4 heads x 64 x bf16
constexpr int kGraphSizes = 67;

// "1,234,567", as vLLM formats token counts.
std::string WithCommas(int64_t n) {
  const std::string digits = absl::StrCat(n);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out.push_back(',');
    out.push_back(digits[i]);
  }
  return out;
}

class VllmProcess {
 public:
  VllmProcess(const VllmSetup& setup, int rank, int command_fd, int reply_fd)
      : setup_(setup),
        rank_(rank),
        gpu_rank_(rank < 0 ? 0 : rank),
        command_fd_(command_fd),
        reply_fd_(reply_fd),
        log_(setup.log_fd, rank < 0 ? "EngineCore_DP0" : absl::StrCat("Worker_TP", rank),
             getpid()) {}

  [[noreturn]] void Run() {
    for (;;) {
      const std::optional<int32_t> command = ReadPacedCommand(command_fd_, -1);
      if (!command) _exit(0);
      if (*command == kVllmTerminateCommand) {
        log_.Info("multiproc_executor.py:520", "Parent process exited, terminating worker");
        Answer(kVllmStepDone, "");
        _exit(0);
      }
      if (*command <= kVllmSymptomCommand) {
        const VllmStep& failed =
            setup_.script.at(static_cast<size_t>(kVllmSymptomCommand - *command));
        VllmFailureDetail d{VllmFailure::kNcclAborted, PhaseOf(failed)};
        d.rank = rank_;
        FailOnGpu(d);
        continue;
      }
      if (Do(setup_.script.at(static_cast<size_t>(*command)))) Answer(kVllmStepDone, "");
    }
  }

 private:
  bool InWorker() const { return rank_ >= 0; }
  int TpSize() const { return setup_.args.tp_size; }

  void Answer(char status, const std::string& message) {
    const std::string reply = status == kVllmStepFailed
                                  ? absl::StrCat(std::string(1, status), message, "\n")
                                  : std::string(1, status);
    if (write(reply_fd_, reply.data(), reply.size()) != static_cast<ssize_t>(reply.size())) {
      _exit(0);
    }
  }

  // Logs a GPU process's failure as vLLM does and answers it; returns false.
  bool FailOnGpu(const VllmFailureDetail& detail) {
    const std::string traceback = VllmGpuTraceback(setup_.site_packages, detail, InWorker());
    if (InWorker()) {
      const bool busy = detail.phase == VllmPhase::kProfile || detail.phase == VllmPhase::kCapture;
      log_.Log(
          "ERROR", busy ? "multiproc_executor.py:671" : "multiproc_executor.py:597",
          absl::StrCat(busy ? "WorkerProc hit an exception.\n" : "WorkerProc failed to start.\n",
                       traceback));
    } else {
      EngineCoreFailed(traceback);
    }
    Answer(kVllmStepFailed, ExceptionMessage(traceback));
    return false;
  }

  // EngineCore's record of its own failure, then what multiprocessing prints as it ends.
  void EngineCoreFailed(const std::string& traceback) {
    log_.Log("ERROR", "core.py:708", absl::StrCat("EngineCore failed to start.\n", traceback));
    log_.Print(
        absl::StrCat("Process EngineCore_DP0:\n", AsProcessExit(setup_.site_packages, traceback)));
  }

  bool Do(const VllmStep& step) {
    switch (step.kind) {
      case VllmStepKind::kEngineInit:
        log_.Info("core.py:77", EngineConfig());
        if (setup_.args.disable_cuda_graph) {
          log_.Info("cuda.py:162", "Cudagraph is disabled under eager mode");
        }
        return true;
      case VllmStepKind::kInitDevice:
        return InitDevice();
      case VllmStepKind::kLoadModel:
        return LoadModel();
      case VllmStepKind::kWeightShard:
        if (gpu_rank_ == 0) log_.Redraw(ShardBar(step.step), step.step == kWeightShards);
        return true;
      case VllmStepKind::kWeightsDone:
        HoldGpuMemory(setup_.env, gpu_.index,
                      static_cast<int64_t>((kWeightsGib + std::max(KvGib(), 0.0)) * 1024));
        log_.Info("default_loader.py:267", "Loading weights took 0.05 seconds");
        log_.Info("gpu_model_runner.py:2370",
                  absl::StrFormat("Model loading took %.4f GiB and 2.61 seconds", kWeightsGib));
        return true;
      case VllmStepKind::kJitOpBegin:
        return JitOpBegin(step.op);
      case VllmStepKind::kJitStepDone:
        return JitStepDone(step.op, step.step);
      case VllmStepKind::kJitLinked:
        return JitLinked(step.op);
      case VllmStepKind::kKvMemory:
        log_.Info("gpu_worker.py:298",
                  absl::StrFormat("Available KV cache memory: %.2f GiB", KvGib()));
        return true;
      case VllmStepKind::kKvCache:
        return KvCache();
      case VllmStepKind::kCaptureBegin:
        capture_started_ = std::chrono::steady_clock::now();
        if (gpu_rank_ == 0) log_.Redraw(GraphBar(0));
        return true;
      case VllmStepKind::kCaptureEnd:
        return CaptureEnd();
      case VllmStepKind::kEngineReady:
        log_.Info(
            "core.py:210",
            absl::StrFormat(
                "init engine (profile, create kv cache, warmup model) took %.2f "
                "seconds",
                std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count() *
                    setup_.speed));
        return true;
    }
    return true;
  }

  std::string EngineConfig() const {
    const ServerArgs& a = setup_.args;
    const std::string served = a.served_model_name.empty() ? a.model_path : a.served_model_name;
    return absl::StrFormat(
        "Initializing a V1 LLM engine (v%s) with config: model='%s', speculative_config=None, "
        "tokenizer='%s', skip_tokenizer_init=False, tokenizer_mode=auto, revision=None, "
        "trust_remote_code=%s, dtype=torch.bfloat16, max_seq_len=%d, download_dir=None, "
        "load_format=auto, tensor_parallel_size=%d, pipeline_parallel_size=1, "
        "data_parallel_size=1, disable_custom_all_reduce=False, quantization=None, "
        "enforce_eager=%s, kv_cache_dtype=auto, device_config=cuda, seed=0, "
        "served_model_name=%s, enable_prefix_caching=True, chunked_prefill_enabled=True",
        kVllmVersion, a.model_path, a.tokenizer_path.empty() ? a.model_path : a.tokenizer_path,
        a.trust_remote_code ? "True" : "False", a.context_length > 0 ? a.context_length : 4096,
        a.tp_size, a.disable_cuda_graph ? "True" : "False", served);
  }

  bool InitDevice() {
    if (!setup_.gpus.ok()) return FailOnGpu({VllmFailure::kNoDriver, VllmPhase::kInitDevice});
    absl::StatusOr<GpuInfo> gpu = VisibleGpu(*setup_.gpus, setup_.env, gpu_rank_);
    if (!gpu.ok()) return FailOnGpu({VllmFailure::kInvalidDevice, VllmPhase::kInitDevice});
    gpu_ = *gpu;
    if (TpSize() > 1) {
      log_.Info("parallel_state.py:1208",
                absl::StrFormat("rank %d in world size %d is assigned as DP rank 0, PP rank 0, TP "
                                "rank %d, EP rank %d",
                                rank_, TpSize(), rank_, rank_));
      log_.Info("pynccl.py:103", "vLLM is using nccl==2.27.3");
    }
    return true;
  }

  bool LoadModel() {
    log_.Info("gpu_model_runner.py:2338",
              absl::StrCat("Starting to load model ", setup_.args.model_path, "..."));
    const std::string& backend = setup_.attention_backend;
    bool known = false;
    for (const std::string& b : VllmAttentionBackends()) known = known || b == backend;
    if (!known) {
      VllmFailureDetail d{VllmFailure::kInvalidBackend, VllmPhase::kLoadModel};
      d.backend = backend;
      return FailOnGpu(d);
    }
    // vllm-flash-attn's kernels are built for SM 8.x and 9.x; SM 12.x has none.
    if (backend == "FLASH_ATTN" && gpu_.compute_capability.rfind("12.", 0) == 0) {
      VllmFailureDetail d{VllmFailure::kBackendUnsupported, VllmPhase::kLoadModel};
      d.backend = backend;
      return FailOnGpu(d);
    }
    log_.Info("cuda.py:253", backend == "FLASHINFER" ? "Using FlashInfer backend on V1 engine."
                             : backend == "TRITON_ATTN"
                                 ? "Using Triton backend on V1 engine."
                                 : absl::StrCat("Using ", backend, " backend on V1 engine."));
    if (gpu_rank_ == 0) log_.Redraw(ShardBar(0));
    return true;
  }

  static std::string ShardBar(int done) {
    return absl::StrFormat(
        "Loading safetensors checkpoint shards: %3d%% Completed | %d/%d [00:%02d<%s, %s]",
        done * 100 / kWeightShards, done, kWeightShards, done * 2,
        done == 0 ? "?" : absl::StrFormat("00:%02d", (kWeightShards - done) * 2),
        done == 0 ? "?it/s" : "2.00s/it");
  }

  static std::string GraphBar(int done) {
    return absl::StrFormat(
        "Capturing CUDA graphs (mixed prefill-decode, PIECEWISE): %3d%%|%-10s| %d/%d "
        "[00:%02d<00:00, "
        "%s]",
        done * 100 / kGraphSizes, std::string(static_cast<size_t>(done * 10 / kGraphSizes), '#'),
        done, kGraphSizes, done == 0 ? 0 : 3, done == 0 ? "?it/s" : "20.10it/s");
  }

  bool JitOpBegin(int index) {
    const JitOp& op = setup_.ops.at(static_cast<size_t>(index));
    const CacheState cache = setup_.cache.at(static_cast<size_t>(index));
    // flashinfer builds under a file lock: rank 0 builds, the other ranks wait and load.
    if (gpu_rank_ != 0) return true;
    log_.Print(absl::StrCat(LogTimestamp(), " - INFO - flashinfer.jit: Loading JIT ops: ", op.uri));
    if (cache == CacheState::kStale) return FailJit(SchedulerFailure::kJitStaleLibrary, op);
    if (cache == CacheState::kValid) return true;
    const JitToolchain& tc = Toolchain();
    if (tc.problem == JitProblem::kNvccNotFound || tc.problem == JitProblem::kNvccBroken) {
      return FailJit(SchedulerFailure::kJitNvcc, op);
    }
    if (tc.problem == JitProblem::kNinjaNotFound) {
      return FailJit(SchedulerFailure::kJitNinjaMissing, op);
    }
    log_.Raw(absl::StrCat("ninja: Entering directory `", setup_.build.CachedOpsDir(), "'\n",
                          setup_.build.StepLine(tc, op, 1)));
    return true;
  }

  bool JitStepDone(int index, int step) {
    if (gpu_rank_ != 0) return true;
    const JitOp& op = setup_.ops.at(static_cast<size_t>(index));
    const JitToolchain& tc = Toolchain();
    if (step == 1 && IsCompileProblem(tc.problem)) {
      log_.Raw(setup_.build.CompileFailure(tc, op, 0));
      return FailJit(SchedulerFailure::kJitNinjaFailed, op);
    }
    log_.Raw(setup_.build.StepLine(tc, op, step + 1));
    return true;
  }

  bool JitLinked(int index) {
    const JitOp& op = setup_.ops.at(static_cast<size_t>(index));
    if (gpu_rank_ == 0 && setup_.cache.at(static_cast<size_t>(index)) == CacheState::kMissing) {
      const JitToolchain& tc = Toolchain();
      if (tc.problem == JitProblem::kLinkLibraryMissing) {
        log_.Raw(setup_.build.LinkFailure(tc, op));
        return FailJit(SchedulerFailure::kJitNinjaFailed, op);
      }
      WriteLibrary(setup_.build.LibraryPath(op));
    }
    log_.Print(absl::StrCat(LogTimestamp(),
                            " - INFO - flashinfer.jit: Finished loading JIT ops: ", op.uri));
    return true;
  }

  bool FailJit(SchedulerFailure failure, const JitOp& op) {
    SchedulerFailureDetail jit{failure};
    jit.toolchain = &Toolchain();
    jit.build = &setup_.build;
    jit.op = &op;
    VllmFailureDetail d{VllmFailure::kJit, VllmPhase::kProfile};
    d.jit = &jit;
    return FailOnGpu(d);
  }

  bool KvCache() {
    if (setup_.fault == Fault::kOom) {
      EngineCoreFailed(EngineCoreTraceback(setup_.site_packages, EngineFailure::kNoKvCacheMemory,
                                           VllmPhase::kProfile, ""));
      Answer(kVllmStepFailed,
             "No available memory for the cache blocks. Try increasing `gpu_memory_utilization` "
             "when initializing the engine.");
      return false;
    }
    // EngineCore has no GPU of its own with workers: the memory is the first visible GPU's.
    if (setup_.gpus.ok()) {
      absl::StatusOr<GpuInfo> gpu = VisibleGpu(*setup_.gpus, setup_.env, 0);
      if (gpu.ok()) gpu_ = *gpu;
    }
    const int64_t tokens =
        static_cast<int64_t>(KvGib() * (1 << 30) / kBytesPerToken) * setup_.args.tp_size;
    const int max_len = setup_.args.context_length > 0 ? setup_.args.context_length : 4096;
    log_.Info("kv_cache_utils.py:1087",
              absl::StrCat("GPU KV cache size: ", WithCommas(tokens), " tokens"));
    log_.Info("kv_cache_utils.py:1091",
              absl::StrFormat("Maximum concurrency for %s tokens per request: %.2fx",
                              WithCommas(max_len), static_cast<double>(tokens) / max_len));
    return true;
  }

  bool CaptureEnd() {
    if (setup_.fault == Fault::kGraphCapture && gpu_rank_ == TpSize() - 1) {
      return FailOnGpu({VllmFailure::kGraphCapture, VllmPhase::kCapture});
    }
    if (gpu_rank_ == 0) log_.Redraw(GraphBar(kGraphSizes), /*close=*/true);
    const double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - capture_started_).count() *
        setup_.speed;
    log_.Info("gpu_model_runner.py:3480",
              absl::StrFormat("Graph capturing finished in %.0f secs, took %.2f GiB", elapsed,
                              kGraphGib));
    return true;
  }

  const JitToolchain& Toolchain() {
    if (!toolchain_) toolchain_ = InspectJitToolchain(setup_.env, setup_.site_packages);
    return *toolchain_;
  }

  // Written whole (temporary file, then rename): a killed build leaves no cached library behind.
  static void WriteLibrary(const std::string& path) {
    std::error_code ec;
    std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
    const std::string tmp = absl::StrCat(path, ".tmp.", getpid());
    {
      std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
      out << kSimLibraryMagic;
    }
    std::filesystem::rename(tmp, path, ec);
  }

  // What is left for the KV cache on this process's GPU (GiB); the oom fault leaves nothing.
  double KvGib() const {
    if (setup_.fault == Fault::kOom) return -0.52;
    return gpu_.MemoryGb() * setup_.args.mem_fraction_static - kWeightsGib - kNonTorchGib -
           kActivationGib;
  }

  const VllmSetup& setup_;
  const int rank_;      // -1: EngineCore
  const int gpu_rank_;  // the CUDA device ordinal this process would use
  const int command_fd_;
  const int reply_fd_;
  const VllmLog log_;
  GpuInfo gpu_;
  std::optional<JitToolchain> toolchain_;
  const std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point capture_started_ = started_;
};

}  // namespace

VllmPhase PhaseOf(const VllmStep& step) {
  switch (step.kind) {
    case VllmStepKind::kEngineInit:
    case VllmStepKind::kInitDevice:
      return VllmPhase::kInitDevice;
    case VllmStepKind::kLoadModel:
    case VllmStepKind::kWeightShard:
    case VllmStepKind::kWeightsDone:
      return VllmPhase::kLoadModel;
    case VllmStepKind::kCaptureBegin:
    case VllmStepKind::kCaptureEnd:
      return VllmPhase::kCapture;
    default:
      return VllmPhase::kProfile;
  }
}

bool VllmStep::OnGpu() const {
  return kind != VllmStepKind::kEngineInit && kind != VllmStepKind::kKvCache &&
         kind != VllmStepKind::kEngineReady;
}

bool VllmStep::InBusyLoop() const {
  return kind == VllmStepKind::kJitOpBegin || kind == VllmStepKind::kJitStepDone ||
         kind == VllmStepKind::kJitLinked || kind == VllmStepKind::kKvMemory ||
         kind == VllmStepKind::kCaptureBegin || kind == VllmStepKind::kCaptureEnd;
}

std::vector<VllmStep> BuildVllmScript(const ServerArgs& args, const std::vector<JitOp>& ops,
                                      const std::vector<CacheState>& cache) {
  std::vector<VllmStep> script = {
      {VllmStepKind::kEngineInit, 1.0},
      {VllmStepKind::kInitDevice, 1.0},
      {VllmStepKind::kLoadModel, 2.5},
  };
  for (int shard = 1; shard <= kWeightShards; ++shard) {
    script.push_back({VllmStepKind::kWeightShard, 2.5, -1, shard});
  }
  script.push_back({VllmStepKind::kWeightsDone, 1.0});
  // The profile run's forward pass plans flashinfer's kernels: their JIT build happens here.
  for (int i = 0; i < static_cast<int>(ops.size()); ++i) {
    if (cache[static_cast<size_t>(i)] != CacheState::kMissing) {
      script.push_back({VllmStepKind::kJitOpBegin, kJitLoadSeconds, i});
      script.push_back({VllmStepKind::kJitLinked, 0, i});
      continue;
    }
    script.push_back({VllmStepKind::kJitOpBegin, kJitStepSeconds, i});
    for (int step = 1; step < ops[static_cast<size_t>(i)].StepCount(); ++step) {
      script.push_back({VllmStepKind::kJitStepDone, kJitStepSeconds, i, step});
    }
    script.push_back({VllmStepKind::kJitLinked, kJitLoadSeconds, i});
  }
  script.push_back({VllmStepKind::kKvMemory, 0.5});
  script.push_back({VllmStepKind::kKvCache, 0.5});
  if (!args.disable_cuda_graph) {
    script.push_back({VllmStepKind::kCaptureBegin, 3.0});
    script.push_back({VllmStepKind::kCaptureEnd, 0.5});
  }
  script.push_back({VllmStepKind::kEngineReady, 0.5});
  return script;
}

void RunVllmProcess(const VllmSetup& setup, int rank, int command_fd, int reply_fd) {
  VllmProcess(setup, rank, command_fd, reply_fd).Run();
}

}  // namespace fleet::sim
