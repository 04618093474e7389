// The diagnosis classes (docs/design.md, "Diagnosis classes"), as a table: the stable strings that
// JSON, SQLite and the CLI show, who can fix each, and how specific a class is when it is known
// only from a symptom. The strings are a contract; never rename one.
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

struct DiagnosisClassInfo {
  std::string_view name;
  FixKind fix;
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

// "toolchain", "env", "jit_cache", "launch_flags", "restart", "supervisor", "report", "none".
std::string_view FixKindName(FixKind kind);
std::optional<FixKind> ParseFixKind(std::string_view name);
// A short phrase for people: "toolchain change in the container", ...
std::string_view FixKindDescription(FixKind kind);

// Whether the fix is a change of the container's toolchain or build environment: the
// `toolchain_fix` field of `fleetctl explain -o json`.
bool IsToolchainFix(FixKind kind);

}  // namespace fleet::diagnosis
