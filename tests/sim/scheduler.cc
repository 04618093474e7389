#include "tests/sim/scheduler.h"

#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "tests/sim/child_pacer.h"
#include "tests/sim/sim_log.h"
#include "tests/sim/toolchain.h"
#include "tests/sim/tracebacks.h"

namespace fleet::sim {
namespace {

// Seconds between the server's readiness and the watchdog fault firing (at speed 1).
constexpr double kWatchdogSeconds = 5.0;
// The tiny model's weights (GB).
constexpr double kWeightsGb = 0.05;

// Uses about `ms` milliseconds of CPU time: what a stuck compiler shows to a CPU-time observer.
void BurnCpu(int ms) {
  timespec start{}, now{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &start);
  volatile uint64_t sink = 0;
  do {
    for (int i = 0; i < 10000; ++i) sink = sink + static_cast<uint64_t>(i);
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
  } while ((now.tv_sec - start.tv_sec) * 1000 + (now.tv_nsec - start.tv_nsec) / 1000000 < ms);
}

class Scheduler {
 public:
  Scheduler(const SchedulerSetup& setup, int command_fd, int reply_fd)
      : setup_(setup),
        command_fd_(command_fd),
        reply_fd_(reply_fd),
        log_(setup.log_fd, absl::StrCat("TP", setup.rank)) {}

  [[noreturn]] void Run() {
    // A leftover in the making: out of the launcher's group, still in its session, and no
    // longer killed with the launcher.
    if (setup_.fault == Fault::kLeftover) {
      prctl(PR_SET_PDEATHSIG, 0);
      setpgid(0, 0);
    }
    for (;;) {
      std::optional<int32_t> command = ReadCommand(/*timeout_ms=*/-1);
      if (!command && setup_.fault == Fault::kLeftover) {
        // The launcher is gone: stay, holding the GPU, until killed.
        for (;;) pause();
      }
      if (!command) _exit(0);
      const bool ok = *command == kWarmupCommand
                          ? Warmup()
                          : Do(setup_.script.at(static_cast<size_t>(*command)));
      if (!ok) WaitForEnd();
      const char done = kStepDone;
      if (write(reply_fd_, &done, 1) != 1) _exit(0);
      if (*command == kWarmupCommand && setup_.fault == Fault::kWatchdog) WatchdogAfterReady();
    }
  }

 private:
  std::optional<int32_t> ReadCommand(int timeout_ms) {
    return ReadPacedCommand(command_fd_, timeout_ms);
  }

  bool Do(const Step& step) {
    switch (step.kind) {
      case StepKind::kPause:
        return true;
      case StepKind::kInitDistributed:
        return InitDistributed();
      case StepKind::kLoadWeights:
        log_.Record("Init torch distributed ends. mem usage=0.09 GB");
        log_.Record(absl::StrFormat("Load weight begin. avail mem=%.2f GB", AvailAtStart()));
        if (setup_.rank == 0) log_.Redraw(ShardBar(0));
        return true;
      case StepKind::kWeightShard:
        if (setup_.rank == 0) log_.Redraw(ShardBar(step.step), step.step == kWeightShards);
        return true;
      case StepKind::kWeightsLoaded:
        return WeightsLoaded();
      case StepKind::kCaptureBegin:
        capture_started_ = std::chrono::steady_clock::now();
        log_.Record(absl::StrFormat(
            "Capture cuda graph begin. This can take up to several minutes. avail mem=%.2f GB",
            AvailAfterPool()));
        log_.Record(
            "Capture cuda graph bs [1, 2, 4, 8, 12, 16, 24, 32, 40, 48, 56, 64, 80, 96, "
            "112, 128, 160, 192, 224, 256]");
        return true;
      case StepKind::kJitOpBegin:
        return JitOpBegin(step.op);
      case StepKind::kJitStepDone:
        return JitStepDone(step.op, step.step);
      case StepKind::kJitLinked:
        return JitLinked(step.op);
      case StepKind::kCaptureEnd:
        return CaptureEnd();
      case StepKind::kReady:
        if (setup_.rank == 0) {
          log_.Record(absl::StrFormat(
              "max_total_num_tokens=%d, chunked_prefill_size=8192, max_prefill_tokens=16384, "
              "max_running_requests=4096, context_len=4096, available_gpu_mem=%.2f GB",
              KvTokens(), AvailAfterCapture()));
        }
        return true;
    }
    return true;
  }

  // tqdm's bar over the checkpoint shards, as SGLang's rank 0 draws it.
  static std::string ShardBar(int done) {
    const double per_shard = 2.5;  // seconds at speed 1
    const int elapsed = static_cast<int>(done * per_shard);
    const int left = static_cast<int>((kWeightShards - done) * per_shard);
    return absl::StrFormat(
        "Loading safetensors checkpoint shards: %3d%% Completed | %d/%d [00:%02d<%s, %s]",
        done * 100 / kWeightShards, done, kWeightShards, elapsed,
        done == 0 ? "?" : absl::StrFormat("00:%02d", left),
        done == 0 ? "?it/s" : absl::StrFormat("%.2fs/it", per_shard));
  }

  bool InitDistributed() {
    log_.Record("Init torch distributed begin.");
    if (!setup_.gpus.ok()) return Fail({SchedulerFailure::kNoDriver});
    absl::StatusOr<GpuInfo> gpu =
        VisibleGpu(*setup_.gpus, setup_.env, setup_.args.base_gpu_id + setup_.rank);
    if (!gpu.ok()) return Fail({SchedulerFailure::kInvalidDevice});
    gpu_ = *gpu;
    if (setup_.fault == Fault::kNccl) return Fail({SchedulerFailure::kNccl});
    return true;
  }

  bool WeightsLoaded() {
    HoldGpuMemory(setup_.env, gpu_.index, static_cast<int64_t>((kWeightsGb + KvGb()) * 1024));
    log_.Record(absl::StrFormat(
        "Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16, avail mem=%.2f GB, mem "
        "usage=%.2f GB.",
        AvailAtStart() - kWeightsGb, kWeightsGb));
    log_.Record(
        absl::StrFormat("KV Cache is allocated. #tokens: %d, K size: %.2f GB, V size: %.2f GB",
                        KvTokens(), KvGb() / 2, KvGb() / 2));
    log_.Record(absl::StrFormat("Memory pool end. avail mem=%.2f GB", AvailAfterPool()));
    // Blackwell (SM 12.x) runs neither FlashAttention 3 nor FlashMLA.
    const std::string backend = EffectiveAttentionBackend(setup_.args);
    if (backend == "fa3" || backend == "flashmla") {
      SchedulerFailureDetail d{SchedulerFailure::kAttentionBackend};
      d.attention_backend = backend;
      return Fail(d);
    }
    return true;
  }

  bool JitOpBegin(int index) {
    const JitOp& op = setup_.ops.at(static_cast<size_t>(index));
    const CacheState cache = setup_.cache.at(static_cast<size_t>(index));
    log_.Record(absl::StrCat("flashinfer.jit: Loading JIT ops: ", op.uri));
    if (cache == CacheState::kStale) return FailJit(SchedulerFailure::kJitStaleLibrary, op);
    if (cache == CacheState::kValid) {
      log_.Record(absl::StrCat("flashinfer.jit: Finished loading JIT ops: ", op.uri));
      return true;
    }
    // flashinfer builds under a file lock: rank 0 builds, the other ranks wait and load.
    if (setup_.rank != 0) return true;
    const JitToolchain& tc = Toolchain();
    if (tc.problem == JitProblem::kNvccNotFound || tc.problem == JitProblem::kNvccBroken) {
      return FailJit(SchedulerFailure::kJitNvcc, op);
    }
    if (tc.problem == JitProblem::kNinjaNotFound) {
      return FailJit(SchedulerFailure::kJitNinjaMissing, op);
    }
    log_.Raw(absl::StrCat("ninja: Entering directory `", setup_.build.CachedOpsDir(), "'\n",
                          setup_.build.StepLine(tc, op, 1)));
    if (setup_.fault == Fault::kHangJit) Hang();
    return true;
  }

  bool JitStepDone(int index, int step) {
    if (setup_.rank != 0) return true;
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
    if (setup_.rank == 0) {
      const JitToolchain& tc = Toolchain();
      if (tc.problem == JitProblem::kLinkLibraryMissing) {
        log_.Raw(setup_.build.LinkFailure(tc, op));
        return FailJit(SchedulerFailure::kJitNinjaFailed, op);
      }
      WriteLibrary(setup_.build.LibraryPath(op));
    }
    log_.Record(absl::StrCat("flashinfer.jit: Finished loading JIT ops: ", op.uri));
    return true;
  }

  bool CaptureEnd() {
    if (setup_.fault == Fault::kOom) {
      SchedulerFailureDetail d{SchedulerFailure::kCaptureOutOfMemory};
      d.gpu = setup_.args.base_gpu_id + setup_.rank;
      d.gpu_total_gib = gpu_.MemoryGb();
      return Fail(d);
    }
    const double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - capture_started_).count();
    log_.Record(absl::StrFormat(
        "Capture cuda graph end. Time elapsed: %.2f s. mem usage=0.43 GB. avail mem=%.2f GB.",
        elapsed, AvailAfterCapture()));
    return true;
  }

  bool Warmup() {
    if (setup_.rank == 0) {
      log_.Record(
          "Prefill batch, #new-seq: 1, #new-token: 7, #cached-token: 0, token usage: "
          "0.00, #running-req: 0, #queue-req: 0, ");
    }
    return true;
  }

  // The simulated watchdog: the scheduler's forward step "hangs" once the server serves.
  [[noreturn]] void WatchdogAfterReady() {
    const int ms = static_cast<int>(kWatchdogSeconds * 1000 / setup_.speed);
    if (!ReadCommand(ms).has_value()) {
      log_.Record("Watchdog timeout (self.watchdog_timeout=300)");
      log_.Record(
          "self.cur_batch.batch_size()=1, self.cur_batch.reqs=[Req(rid=5f3b0c, "
          "input_ids=[1, 450, 7483, 310, 3444, 338, 29871])]");
      kill(setup_.launcher, SIGQUIT);
    }
    WaitForEnd();
  }

  // A compile that never finishes: no output, a little CPU, until the launcher ends us.
  [[noreturn]] void Hang() {
    for (;;) {
      BurnCpu(2);
      timespec pause{0, 48 * 1000 * 1000};
      nanosleep(&pause, nullptr);
    }
  }

  bool FailJit(SchedulerFailure failure, const JitOp& op) {
    SchedulerFailureDetail d{failure};
    d.toolchain = &Toolchain();
    d.build = &setup_.build;
    d.op = &op;
    return Fail(d);
  }

  // Logs the exception and tells the launcher, as SGLang's scheduler does; returns false.
  bool Fail(const SchedulerFailureDetail& detail) {
    log_.Record(SchedulerException(setup_.site_packages, detail));
    kill(setup_.launcher, SIGQUIT);
    return false;
  }

  // Waits for the launcher to end this process (SIGKILL) or to close the command pipe.
  [[noreturn]] void WaitForEnd() {
    while (ReadCommand(-1).has_value()) {
    }
    _exit(1);
  }

  const JitToolchain& Toolchain() {
    if (!toolchain_) toolchain_ = InspectJitToolchain(setup_.env, setup_.site_packages);
    return *toolchain_;
  }

  // Writes the built library whole (temporary file, then rename) so that a killed build leaves
  // nothing a later start would take for a cached library.
  void WriteLibrary(const std::string& path) {
    std::error_code ec;
    std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
    const std::string tmp = absl::StrCat(path, ".tmp.", getpid());
    {
      std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
      out << kSimLibraryMagic;
    }
    std::filesystem::rename(tmp, path, ec);
  }

  double TotalGb() const { return gpu_.MemoryGb(); }
  double AvailAtStart() const { return TotalGb() - 1.09; }
  double MemFraction() const {
    return setup_.args.mem_fraction_static > 0 ? setup_.args.mem_fraction_static : 0.871;
  }
  double KvGb() const { return TotalGb() * MemFraction() - kWeightsGb; }
  // Tokens of KV cache for the tiny model: 2 layers x (K, V) x 4 heads x 64 dims x 2 bytes.
  int KvTokens() const { return static_cast<int>(KvGb() * (1 << 30) / 2048); }
  double AvailAfterPool() const { return AvailAtStart() - kWeightsGb - KvGb(); }
  double AvailAfterCapture() const { return AvailAfterPool() - 0.43; }

  const SchedulerSetup& setup_;
  const int command_fd_;
  const int reply_fd_;
  const SimLog log_;
  GpuInfo gpu_;
  std::optional<JitToolchain> toolchain_;
  std::chrono::steady_clock::time_point capture_started_ = std::chrono::steady_clock::now();
};

}  // namespace

void RunScheduler(const SchedulerSetup& setup, int command_fd, int reply_fd) {
  Scheduler(setup, command_fd, reply_fd).Run();
}

}  // namespace fleet::sim
