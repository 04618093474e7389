// Diagnosis: what the classifier concluded about one log (one start attempt): the class (a string
// of docs/design.md's table), the root-cause line, the evidence, the facts, and the symptoms it
// saw.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/diagnosis/diagnosis_class.h"
#include "common/diagnosis/evidence.h"
#include "common/diagnosis/facts.h"
#include "common/diagnosis/signature.h"

namespace fleet::diagnosis {

struct SymptomHit {
  int64_t line = 0;
  std::string diagnosis_class;
  std::string signature_id;
};

struct Diagnosis {
  std::string diagnosis_class = "none";
  // The catalogue signature that decided, or "" for a class derived from a phase or the stall rule.
  std::string signature_id;
  // The deciding line (1-based): the root cause, else the symptom or phase line the class came
  // from; 0 for `none`.
  int64_t root_cause_line = 0;
  std::string summary;
  FixKind fix = FixKind::kNone;
  // kLow when the class is inferred (a stem, a cut-off message, a traceback's frames): then
  // toolchain_fix is false and nothing is remediated automatically.
  Confidence confidence = Confidence::kHigh;
  // Whether a change of the container's toolchain or build environment could fix it (never for
  // a low-confidence diagnosis).
  bool toolchain_fix = false;
  // The failing unit's kind and lines.
  UnitKind unit = UnitKind::kNone;
  std::vector<EvidenceLine> evidence;
  Facts facts;
  // Symptom lines seen (bounded), whether or not a root cause was found.
  std::vector<SymptomHit> symptoms;
  // Where the log ended: the startup phase, the JIT op being built, the last ninja step.
  Phase phase = Phase::kStarting;
  std::string phase_detail;
  int64_t progress_step = 0;
  int64_t progress_total = 0;
  int64_t lines = 0;
  // True until the failing unit has ended (or the input has): a later line may still extend it.
  bool provisional = false;
};

}  // namespace fleet::diagnosis
