#include "common/diagnosis/diagnosis_class.h"

namespace fleet::diagnosis {
namespace {

constexpr DiagnosisClassInfo kClasses[] = {
    {"missing_shared_library", FixKind::kToolchain, 4,
     "a CUDA library cannot be loaded: the pip CUDA libraries are not on the loader path"},
    {"nvcc_not_found", FixKind::kToolchain, 4,
     "no CUDA compiler was found (nvcc missing, or CUDA_HOME unset or malformed)"},
    {"ninja_not_found", FixKind::kToolchain, 4,
     "the JIT build tool ninja is not on the server's PATH"},
    {"cuda_header_mismatch", FixKind::kToolchain, 4,
     "the CUDA compiler and the CUDA headers on the include path are different releases"},
    {"ptx_version_unsupported", FixKind::kToolchain, 4, "ptxas is older than the PTX it was given"},
    {"link_error", FixKind::kToolchain, 4, "a JIT link step failed"},
    {"nvcc_too_old", FixKind::kToolchain, 4, "nvcc rejects an option the build needs"},
    {"unsupported_gpu_arch", FixKind::kReport, 4,
     "the toolchain or the installed wheels do not know this GPU's architecture"},
    {"jit_oom_killed", FixKind::kEnv, 4,
     "a JIT compile step was killed, most likely out of host memory"},
    {"jit_build_failed", FixKind::kReport, 4, "a JIT compile step failed"},
    {"stale_jit_cache", FixKind::kJitCache, 4, "a JIT cache artefact is half-built or stale"},
    {"attention_backend_unsupported", FixKind::kLaunchFlags, 4,
     "the chosen attention backend does not support this GPU"},
    {"cuda_graph_capture_failed", FixKind::kLaunchFlags, 4, "CUDA graph capture failed"},
    {"gpu_driver_unavailable", FixKind::kReport, 4,
     "the GPU driver is missing or too old for this CUDA runtime: the host must fix it"},
    {"abi_mismatch", FixKind::kReport, 4,
     "a prebuilt extension does not match the installed torch (undefined symbol)"},
    {"cuda_out_of_memory", FixKind::kReport, 4, "the GPU ran out of memory"},
    {"port_in_use", FixKind::kReport, 4, "the server's port is already in use"},
    {"model_not_found", FixKind::kReport, 4, "the model weights or path were not found"},
    {"nccl_error", FixKind::kReport, 4, "distributed communication (NCCL) failed"},
    {"runtime_watchdog", FixKind::kRestart, 4, "the server's watchdog fired"},
    {"startup_stalled", FixKind::kSupervisor, 0,
     "the start made no progress: the log ends inside an unfinished JIT compile"},
    {"startup_deadline_exceeded", FixKind::kSupervisor, 0,
     "the server was still not ready at the startup deadline"},
    {"child_process_failed", FixKind::kReport, 2,
     "a child process of the server failed and no cause was found nearby"},
    {"unknown", FixKind::kReport, 1, "the log shows a failure that no signature recognises"},
    {"none", FixKind::kNone, 0, "the log shows no failure"},
};

}  // namespace

absl::Span<const DiagnosisClassInfo> AllDiagnosisClasses() { return kClasses; }

const DiagnosisClassInfo* FindDiagnosisClass(std::string_view name) {
  for (const DiagnosisClassInfo& c : kClasses) {
    if (c.name == name) return &c;
  }
  return nullptr;
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
