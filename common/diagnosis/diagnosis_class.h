// The diagnosis classes (docs/design.md, "Diagnosis classes"), as one table: the stable strings
// that JSON, SQLite and the CLI show, who can fix each, whether a plain relaunch may still work,
// and how specific a class is when it is known only from a symptom. The strings are a contract;
// never rename one. Code names a class through the constants below (never a new literal), and every
// constant has its row in the table (diagnosis_class_test.cc checks both ways).
#pragma once

#include <optional>
#include <string_view>

#include "absl/types/span.h"

namespace fleet::diagnosis {

// What kind of change can fix a failure. Toolchain, Env and JitCache are changes inside the
// container the planner may make; the others are not toolchain changes.
enum class FixKind {
  kNone,         // nothing failed
  kToolchain,    // loader path, compiler, build tool, versions, link path
  kEnv,          // environment of the build (MAX_JOBS)
  kJitCache,     // clear the JIT cache directory
  kLaunchFlags,  // server flags (fallback backend, no CUDA graphs)
  kRestart,      // restart only
  kSupervisor,   // a supervisor decision (timeouts)
  kReport,       // nothing inside the container fixes it: report with the evidence
};

// The class names, one constant each, in the table's order.
namespace classes {
inline constexpr char kMissingSharedLibrary[] = "missing_shared_library";
inline constexpr char kNvccNotFound[] = "nvcc_not_found";
inline constexpr char kNinjaNotFound[] = "ninja_not_found";
inline constexpr char kCudaHeaderMismatch[] = "cuda_header_mismatch";
inline constexpr char kPtxVersionUnsupported[] = "ptx_version_unsupported";
inline constexpr char kLinkError[] = "link_error";
inline constexpr char kNvccTooOld[] = "nvcc_too_old";
inline constexpr char kUnsupportedGpuArch[] = "unsupported_gpu_arch";
inline constexpr char kJitOomKilled[] = "jit_oom_killed";
inline constexpr char kJitBuildFailed[] = "jit_build_failed";
inline constexpr char kStaleJitCache[] = "stale_jit_cache";
inline constexpr char kAttentionBackendUnsupported[] = "attention_backend_unsupported";
inline constexpr char kCudaGraphCaptureFailed[] = "cuda_graph_capture_failed";
inline constexpr char kGpuDriverUnavailable[] = "gpu_driver_unavailable";
inline constexpr char kAbiMismatch[] = "abi_mismatch";
inline constexpr char kCudaOutOfMemory[] = "cuda_out_of_memory";
inline constexpr char kPortInUse[] = "port_in_use";
inline constexpr char kModelNotFound[] = "model_not_found";
inline constexpr char kNcclError[] = "nccl_error";
inline constexpr char kRuntimeWatchdog[] = "runtime_watchdog";
inline constexpr char kStartupStalled[] = "startup_stalled";
inline constexpr char kStartupDeadlineExceeded[] = "startup_deadline_exceeded";
inline constexpr char kChildProcessFailed[] = "child_process_failed";
inline constexpr char kUnknown[] = "unknown";
inline constexpr char kNone[] = "none";
}  // namespace classes

// Whether a plain relaunch (with back-off) may still work after a failure of the class.
enum class Retry {
  kNo,   // something in the container is wrong: the same start fails the same way
  kYes,  // nothing in the container is wrong, something around it was (another process's
         // memory or port, the network, a stall) or the cause is not known
};

struct DiagnosisClassInfo {
  std::string_view name;
  FixKind fix;
  Retry retry;
  // Used when a log shows only symptoms: the most specific symptom wins. 0 for classes that are
  // never symptoms; 1 for `unknown`, 2 for `child_process_failed`, 4 for specific ones. (3 is
  // an unrecognised exception that ends a traceback: a cause was found, just not named.)
  int symptom_rank;
  // One plain sentence used when no signature supplies a better one.
  std::string_view summary;
};

absl::Span<const DiagnosisClassInfo> AllDiagnosisClasses();

// nullptr when `name` is not a class of the table.
const DiagnosisClassInfo* FindDiagnosisClass(std::string_view name);

// Whether relaunching with back-off may still help after a failure of `name`: true for no class
// ("" or "none": the server ended without a diagnosed failure) and for the classes marked
// Retry::kYes; false for the others and for a name the table does not know.
bool RetryMayHelp(std::string_view name);

// "toolchain", "env", "jit_cache", "launch_flags", "restart", "supervisor", "report", "none".
std::string_view FixKindName(FixKind kind);
std::optional<FixKind> ParseFixKind(std::string_view name);
// A short phrase for people: "toolchain change in the container", ...
std::string_view FixKindDescription(FixKind kind);

// Whether the fix is a change of the container's toolchain or build environment: the
// `toolchain_fix` field of `fleetctl explain -o json`.
bool IsToolchainFix(FixKind kind);

}  // namespace fleet::diagnosis
