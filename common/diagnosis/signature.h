// Signature: one entry of the signature catalogue (a regular expression with what a match means),
// and the phases and unit kinds the classifier reasons with.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "common/diagnosis/diagnosis_class.h"

namespace fleet::diagnosis {

// What a line matching a signature tells.
enum class SignatureRole {
  kRootCause,  // names a cause (class); the earliest one in the failing unit decides
  kSymptom,    // a consequence; points at a class used only when no cause is found
  kPhase,      // the server entered (or left) a startup phase
  kProgress,   // a build step counter (ninja "[n/m]"); named captures `step` and `total`
  kContext,    // carries facts only (versions, paths, package lists)
};

// Startup phases, as in the state machine of docs/design.md.
enum class Phase { kStarting, kLoading, kJitCompiling, kCapturingGraphs, kReady };

// The structural units of a log that a failure is reported with.
enum class UnitKind {
  kNone,
  kNinjaFailed,     // a ninja "FAILED: target" block up to the next step or "ninja: build stopped"
  kTraceback,       // a Python traceback up to its exception line
  kWorkerError,     // vLLM "Worker failed with error '...'" (a quoted, possibly multi-line message)
  kCompilerOutput,  // a compiler diagnostic: "In file included from" chain, error, source excerpt
  kLoose,           // root-cause or symptom lines outside any other unit, with trailing context
};

// How far a diagnosis can be trusted: kHigh for a signature matched on an intact line, kLow for
// an inference (a message's stem, a message cut off, only a traceback's frames). A low-confidence
// diagnosis is reported but never sets toolchain_fix nor triggers an automatic remediation.
enum class Confidence { kHigh, kLow };

// What a low-confidence root cause is inferred from, beyond a stem matched on a line.
enum class Inference {
  kNone,
  // A message cut off where its line ends (an excerpt's end, a dying process): the pattern is
  // generated from `after` and a prefix of `cut_text` that ends the line.
  kCut,
  // A traceback frame of a known function: counts only when its traceback lost the exception
  // line, and the innermost such frame decides.
  kFrame,
};

std::string_view ConfidenceName(Confidence confidence);  // "high", "low"
std::optional<Confidence> ParseConfidence(std::string_view name);

std::string_view SignatureRoleName(SignatureRole role);
std::string_view PhaseName(Phase phase);  // "STARTING", "LOADING", ...
std::string_view UnitKindName(UnitKind kind);

struct Signature {
  std::string id;
  SignatureRole role = SignatureRole::kContext;
  // RE2 syntax, matched unanchored against one line (bytes, Latin-1). Named captures
  // `(?P<key>...)` become facts; a `__N` suffix is dropped (`gpu_arch__2` -> `gpu_arch`) so one
  // pattern can capture a key in two alternatives; `package` + `version` add to `packages`.
  std::string pattern;
  // Root causes and symptoms: the class, and what kind of fix applies (the class's by default).
  std::string diagnosis_class;
  FixKind fix = FixKind::kNone;
  // Root causes: one sentence; `{key}` is replaced by the fact captured under that name.
  std::string summary;
  // Only counts inside this kind of unit (kNone: anywhere).
  UnitKind within = UnitKind::kNone;
  // Phases: the phase a match enters, and/or one it ends. Progress: `phase` is the phase whose
  // steps the match counts (enters_phase false: jit_compiling, a build's steps).
  bool enters_phase = false;
  Phase phase = Phase::kStarting;
  bool ends_phase = false;
  Phase ended_phase = Phase::kStarting;
  // Phases: the class of a failure seen during this phase when no cause is found.
  std::string failure_class;
  // Root causes and symptoms: how far a match can be trusted (kLow for a stem signature).
  Confidence confidence = Confidence::kHigh;
  // Root causes: an inference (implies kLow). Frames may require an outer frame of the same
  // traceback to match `caller` (RE2).
  Inference infer = Inference::kNone;
  std::string caller;
  // A cut signature's `after` and `cut_tail` as written (its pattern is made from them): each is
  // checked on its own, so that an error names its field.
  std::string cut_after;
  std::string cut_tail;
  // Collect every occurrence of the captures on a line, not only the first.
  bool all_matches = false;
  // Root causes: the failure follows another process's (NCCL's "remote process exited": a
  // tensor-parallel peer died first), so a later root cause that is not one replaces it: the
  // peer's own cause, wherever the processes' lines land in the log.
  bool consequence = false;
  // Where the signature was defined, for error messages: "signatures.conf:12".
  std::string origin;
};

}  // namespace fleet::diagnosis
