#include "common/diagnosis/diagnosis_class.h"

namespace fleet::diagnosis {
namespace {

constexpr DiagnosisClassInfo kClasses[] = {
    {classes::kMissingSharedLibrary, FixKind::kToolchain, Retry::kNo, 4,
     "a CUDA library cannot be loaded: the pip CUDA libraries are not on the loader path"},
    {classes::kNvccNotFound, FixKind::kToolchain, Retry::kNo, 4,
     "no CUDA compiler was found (nvcc missing, or CUDA_HOME unset or malformed)"},
    {classes::kNinjaNotFound, FixKind::kToolchain, Retry::kNo, 4,
     "the JIT build tool ninja is not on the server's PATH"},
    {classes::kCudaHeaderMismatch, FixKind::kToolchain, Retry::kNo, 4,
     "the CUDA compiler and the CUDA headers on the include path are different releases"},
    {classes::kPtxVersionUnsupported, FixKind::kToolchain, Retry::kNo, 4,
     "ptxas is older than the PTX it was given"},
    {classes::kLinkError, FixKind::kToolchain, Retry::kNo, 4, "a JIT link step failed"},
    {classes::kNvccTooOld, FixKind::kToolchain, Retry::kNo, 4,
     "nvcc rejects an option the build needs"},
    {classes::kUnsupportedGpuArch, FixKind::kReport, Retry::kNo, 4,
     "the toolchain or the installed wheels do not know this GPU's architecture"},
    {classes::kJitOomKilled, FixKind::kEnv, Retry::kNo, 4,
     "a JIT compile step was killed, most likely out of host memory"},
    {classes::kJitBuildFailed, FixKind::kReport, Retry::kNo, 4, "a JIT compile step failed"},
    {classes::kStaleJitCache, FixKind::kJitCache, Retry::kNo, 4,
     "a JIT cache artefact is half-built or stale"},
    {classes::kAttentionBackendUnsupported, FixKind::kLaunchFlags, Retry::kNo, 4,
     "the chosen attention backend does not support this GPU"},
    {classes::kCudaGraphCaptureFailed, FixKind::kLaunchFlags, Retry::kNo, 4,
     "CUDA graph capture failed"},
    {classes::kGpuDriverUnavailable, FixKind::kReport, Retry::kNo, 4,
     "the GPU driver is missing or too old for this CUDA runtime: the host must fix it"},
    {classes::kAbiMismatch, FixKind::kReport, Retry::kNo, 4,
     "a prebuilt extension does not match the installed torch (undefined symbol)"},
    {classes::kCudaOutOfMemory, FixKind::kReport, Retry::kYes, 4, "the GPU ran out of memory"},
    {classes::kPortInUse, FixKind::kReport, Retry::kYes, 4, "the server's port is already in use"},
    {classes::kModelNotFound, FixKind::kReport, Retry::kNo, 4,
     "the model weights or path were not found"},
    {classes::kNcclError, FixKind::kReport, Retry::kYes, 4,
     "distributed communication (NCCL) failed"},
    {classes::kRuntimeWatchdog, FixKind::kRestart, Retry::kYes, 4, "the server's watchdog fired"},
    {classes::kStartupStalled, FixKind::kSupervisor, Retry::kYes, 0,
     "the start made no progress: the log ends inside an unfinished JIT compile"},
    {classes::kStartupDeadlineExceeded, FixKind::kSupervisor, Retry::kYes, 0,
     "the server was still not ready at the startup deadline"},
    {classes::kChildProcessFailed, FixKind::kReport, Retry::kYes, 2,
     "a child process of the server failed and no cause was found nearby"},
    {classes::kUnknown, FixKind::kReport, Retry::kYes, 1,
     "the log shows a failure that no signature recognises"},
    {classes::kNone, FixKind::kNone, Retry::kNo, 0, "the log shows no failure"},
};

}  // namespace

absl::Span<const DiagnosisClassInfo> AllDiagnosisClasses() { return kClasses; }

const DiagnosisClassInfo* FindDiagnosisClass(std::string_view name) {
  for (const DiagnosisClassInfo& c : kClasses) {
    if (c.name == name) return &c;
  }
  return nullptr;
}

bool RetryMayHelp(std::string_view name) {
  if (name.empty() || name == classes::kNone) return true;
  const DiagnosisClassInfo* info = FindDiagnosisClass(name);
  return info != nullptr && info->retry == Retry::kYes;
}

std::string_view FixKindName(FixKind kind) {
  switch (kind) {
    case FixKind::kNone:
      return "none";
    case FixKind::kToolchain:
      return "toolchain";
    case FixKind::kEnv:
      return "env";
    case FixKind::kJitCache:
      return "jit_cache";
    case FixKind::kLaunchFlags:
      return "launch_flags";
    case FixKind::kRestart:
      return "restart";
    case FixKind::kSupervisor:
      return "supervisor";
    case FixKind::kReport:
      return "report";
  }
  return "none";
}

std::optional<FixKind> ParseFixKind(std::string_view name) {
  for (FixKind k :
       {FixKind::kNone, FixKind::kToolchain, FixKind::kEnv, FixKind::kJitCache,
        FixKind::kLaunchFlags, FixKind::kRestart, FixKind::kSupervisor, FixKind::kReport}) {
    if (FixKindName(k) == name) return k;
  }
  return std::nullopt;
}

std::string_view FixKindDescription(FixKind kind) {
  switch (kind) {
    case FixKind::kNone:
      return "nothing to fix";
    case FixKind::kToolchain:
      return "toolchain change inside the container";
    case FixKind::kEnv:
      return "build environment change inside the container (MAX_JOBS)";
    case FixKind::kJitCache:
      return "clear the JIT cache inside the container";
    case FixKind::kLaunchFlags:
      return "launch flags (a fallback that trades speed for a start)";
    case FixKind::kRestart:
      return "restart the server";
    case FixKind::kSupervisor:
      return "supervisor decision (timeouts)";
    case FixKind::kReport:
      return "report only: no change inside the container fixes it";
  }
  return "";
}

bool IsToolchainFix(FixKind kind) {
  return kind == FixKind::kToolchain || kind == FixKind::kEnv || kind == FixKind::kJitCache;
}

}  // namespace fleet::diagnosis
