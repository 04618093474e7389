#include "common/diagnosis/signature_catalogue.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <set>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/base/string_view.h"

namespace fleet::diagnosis {
namespace {

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) {
    s.remove_suffix(1);
  }
  return s;
}

bool IsIdentifier(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-' && c != '.') {
      return false;
    }
  }
  return true;
}

std::optional<SignatureRole> ParseRole(std::string_view v) {
  if (v == "root_cause") return SignatureRole::kRootCause;
  if (v == "symptom") return SignatureRole::kSymptom;
  if (v == "phase") return SignatureRole::kPhase;
  if (v == "progress") return SignatureRole::kProgress;
  if (v == "context") return SignatureRole::kContext;
  return std::nullopt;
}

std::optional<Phase> ParsePhase(std::string_view v) {
  if (v == "loading") return Phase::kLoading;
  if (v == "jit_compiling") return Phase::kJitCompiling;
  if (v == "capturing_graphs") return Phase::kCapturingGraphs;
  if (v == "ready") return Phase::kReady;
  return std::nullopt;
}

std::optional<UnitKind> ParseUnit(std::string_view v) {
  if (v == "ninja_failed") return UnitKind::kNinjaFailed;
  if (v == "traceback") return UnitKind::kTraceback;
  if (v == "worker_error") return UnitKind::kWorkerError;
  return std::nullopt;
}

std::optional<Inference> ParseInference(std::string_view v) {
  if (v == "cut") return Inference::kCut;
  if (v == "frame") return Inference::kFrame;
  return std::nullopt;
}

// A cut signature's fields, kept apart until its section ends.
struct CutFields {
  std::string text;  // cut_text
  int min = 0;       // cut_min (0: not given)
  std::string after;
  std::string tail;  // cut_tail
  bool given() const { return !text.empty() || min > 0 || !after.empty() || !tail.empty(); }
};

// RE2 for the literal `text` (printable ASCII).
std::string QuoteLiteral(std::string_view text) {
  std::string out;
  for (char c : text) {
    if (std::strchr("\\.^$|?*+()[]{}", c) != nullptr) out.push_back('\\');
    out.push_back(c);
  }
  return out;
}

// The pattern of a cut signature: `after`, then a prefix of `text` at least `min` bytes long and
// shorter than the whole text (a whole message is its intact signature's), ending the line. With
// a `tail` (the variable part that follows the text, cut too), the whole text and the tail.
std::string CutPattern(const CutFields& cut) {
  const std::string_view text = cut.text;
  const size_t min = static_cast<size_t>(cut.min);
  const size_t end = cut.tail.empty() ? text.size() - 1 : text.size();
  std::string out = cut.after.empty() ? "" : absl::StrCat("(?:", cut.after, ")");
  absl::StrAppend(&out, QuoteLiteral(text.substr(0, min)));
  for (size_t i = min; i < end; ++i) {
    absl::StrAppend(&out, "(?:", QuoteLiteral(text.substr(i, 1)));
  }
  if (!cut.tail.empty()) absl::StrAppend(&out, "(?:", cut.tail, ")?");
  for (size_t i = min; i < end; ++i) out.append(")?");
  out.append("\\s*$");
  return out;
}

// Checks a finished section; `line` is where it started.
absl::Status Validate(const Signature& s, const std::string& where, bool has_fix) {
  auto error = [&](std::string_view msg) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": signature ", s.id, ": ", std::string(msg)));
  };
  if (s.pattern.empty()) return error("field 'pattern' is required");
  const bool classifies = s.role == SignatureRole::kRootCause || s.role == SignatureRole::kSymptom;
  if (classifies && s.diagnosis_class.empty()) {
    return error("field 'class' is required for root_cause and symptom signatures");
  }
  if (!classifies && !s.diagnosis_class.empty()) {
    return error("field 'class' applies only to root_cause and symptom signatures");
  }
  if (!classifies && has_fix) return error("field 'fix' applies only to root_cause and symptom");
  if (!classifies && s.confidence != Confidence::kHigh) {
    return error("field 'confidence' applies only to root_cause and symptom signatures");
  }
  if (s.infer != Inference::kNone && s.role != SignatureRole::kRootCause) {
    return error("field 'infer' applies only to root_cause signatures");
  }
  if (s.consequence && s.role != SignatureRole::kRootCause) {
    return error("field 'consequence' applies only to root_cause signatures");
  }
  if (!s.caller.empty() && s.infer != Inference::kFrame) {
    return error("field 'caller' applies only to 'infer = frame' signatures");
  }
  if (s.role == SignatureRole::kProgress) {
    if (s.ends_phase || !s.failure_class.empty()) {
      return error("fields 'ends' and 'failure_class' apply only to phase signatures");
    }
    if (s.enters_phase && s.phase == Phase::kReady) {
      return error(
          "field 'phase': a progress signature counts loading, jit_compiling or "
          "capturing_graphs");
    }
  } else if (s.role != SignatureRole::kPhase &&
             (s.enters_phase || s.ends_phase || !s.failure_class.empty())) {
    return error(
        "fields 'phase', 'ends' and 'failure_class' apply only to phase and progress signatures");
  }
  if (s.role == SignatureRole::kPhase && !s.enters_phase && !s.ends_phase) {
    return error("a phase signature needs 'phase' or 'ends'");
  }
  return absl::OkStatus();
}

// Structural patterns, in the order of enum Structure.
constexpr const char* kStructurePatterns[] = {
    R"(FAILED: )",
    R"(Traceback \(most recent call last\))",
    R"(File "[^"]*", line \d+)",
    R"(Worker failed with error ')",
    R"(In file included from )",
};

}  // namespace

std::vector<std::string> MatcherPatterns(const std::vector<Signature>& signatures) {
  std::vector<std::string> patterns;
  patterns.reserve(signatures.size() + std::size(kStructurePatterns));
  for (const Signature& s : signatures) patterns.push_back(s.pattern);
  for (const char* p : kStructurePatterns) patterns.emplace_back(p);
  return patterns;
}

std::string_view ConfidenceName(Confidence confidence) {
  return confidence == Confidence::kLow ? "low" : "high";
}

std::optional<Confidence> ParseConfidence(std::string_view name) {
  if (name == "high") return Confidence::kHigh;
  if (name == "low") return Confidence::kLow;
  return std::nullopt;
}

std::string_view SignatureRoleName(SignatureRole role) {
  switch (role) {
    case SignatureRole::kRootCause:
      return "root_cause";
    case SignatureRole::kSymptom:
      return "symptom";
    case SignatureRole::kPhase:
      return "phase";
    case SignatureRole::kProgress:
      return "progress";
    case SignatureRole::kContext:
      return "context";
  }
  return "";
}

std::string_view PhaseName(Phase phase) {
  switch (phase) {
    case Phase::kStarting:
      return "STARTING";
    case Phase::kLoading:
      return "LOADING";
    case Phase::kJitCompiling:
      return "JIT_COMPILING";
    case Phase::kCapturingGraphs:
      return "CAPTURING_GRAPHS";
    case Phase::kReady:
      return "READY";
  }
  return "";
}

std::string_view UnitKindName(UnitKind kind) {
  switch (kind) {
    case UnitKind::kNone:
      return "none";
    case UnitKind::kNinjaFailed:
      return "ninja_failed";
    case UnitKind::kTraceback:
      return "traceback";
    case UnitKind::kWorkerError:
      return "worker_error";
    case UnitKind::kCompilerOutput:
      return "compiler_output";
    case UnitKind::kLoose:
      return "lines";
  }
  return "";
}

absl::StatusOr<std::vector<Signature>> ParseSignatureCatalogue(std::string_view text,
                                                               std::string_view origin) {
  std::vector<Signature> out;
  std::set<std::string> ids;
  Signature current;
  std::string current_where;
  bool in_section = false;
  bool has_role = false;
  bool has_fix = false;
  std::set<std::string> seen_keys;
  CutFields cut;

  auto finish = [&]() -> absl::Status {
    if (!in_section) return absl::OkStatus();
    if (!has_role) {
      return absl::InvalidArgumentError(
          absl::StrCat(current_where, ": signature ", current.id, ": field 'role' is required"));
    }
    auto cut_error = [&](std::string_view msg) {
      return absl::InvalidArgumentError(
          absl::StrCat(current_where, ": signature ", current.id, ": ", std::string(msg)));
    };
    if (current.infer == Inference::kCut) {
      if (!current.pattern.empty()) {
        return cut_error("an 'infer = cut' signature has no 'pattern': it is made from 'cut_text'");
      }
      if (cut.text.empty()) return cut_error("field 'cut_text' is required for 'infer = cut'");
      if (cut.min == 0) cut.min = std::min<int>(12, static_cast<int>(cut.text.size()) - 1);
      if (cut.min < 3 || static_cast<size_t>(cut.min) >= cut.text.size()) {
        return cut_error("field 'cut_min' must be at least 3 and shorter than 'cut_text'");
      }
      current.pattern = CutPattern(cut);
      current.cut_after = cut.after;
      current.cut_tail = cut.tail;
    } else if (cut.given()) {
      return cut_error(
          "fields 'cut_text', 'cut_min', 'cut_tail' and 'after' apply only to 'infer = cut'");
    }
    // An inferred cause says what it was inferred from, in its own summary or the class's.
    if (current.infer != Inference::kNone && current.summary.empty()) {
      current.summary = std::string(FindDiagnosisClass(current.diagnosis_class)->summary);
    }
    if (current.infer == Inference::kCut) {
      absl::StrAppend(&current.summary, " (read from a message cut off where its line ends)");
    } else if (current.infer == Inference::kFrame) {
      absl::StrAppend(&current.summary,
                      " (inferred from the last frames of a traceback that lost its exception "
                      "line)");
    }
    if (current.infer != Inference::kNone) {
      if (seen_keys.count("confidence") > 0 && current.confidence == Confidence::kHigh) {
        return cut_error("an inferred cause ('infer') has confidence low");
      }
      current.confidence = Confidence::kLow;
    }
    absl::Status s = Validate(current, current_where, has_fix);
    if (!s.ok()) return s;
    if (!has_fix && !current.diagnosis_class.empty()) {
      current.fix = FindDiagnosisClass(current.diagnosis_class)->fix;
    }
    out.push_back(std::move(current));
    current = Signature();
    cut = CutFields();
    return absl::OkStatus();
  };

  int line_no = 0;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string_view::npos) nl = text.size();
    std::string_view line = Trim(text.substr(pos, nl - pos));
    pos = nl + 1;
    ++line_no;
    const std::string where = absl::StrCat(std::string(origin), ":", line_no);
    if (line.empty() || line.front() == '#') {
      if (nl == text.size()) break;
      continue;
    }
    if (line.front() == '[') {
      if (line.back() != ']') {
        return absl::InvalidArgumentError(absl::StrCat(where, ": section header needs a ']'"));
      }
      absl::Status s = finish();
      if (!s.ok()) return s;
      std::string id(Trim(line.substr(1, line.size() - 2)));
      if (!IsIdentifier(id)) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ": signature id '", id, "' must be letters, digits, _ - ."));
      }
      if (!ids.insert(id).second) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ": duplicate signature id '", id, "'"));
      }
      current.id = id;
      current.origin = where;
      current_where = where;
      in_section = true;
      has_role = false;
      has_fix = false;
      seen_keys.clear();
      if (nl == text.size()) break;
      continue;
    }
    const size_t eq = line.find('=');
    if (eq == std::string_view::npos) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": expected 'key = value'"));
    }
    if (!in_section) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": 'key = value' before the first [signature] header"));
    }
    const std::string key(Trim(line.substr(0, eq)));
    const std::string_view value = Trim(line.substr(eq + 1));
    if (!seen_keys.insert(key).second) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": field '", key, "' given twice"));
    }
    auto bad_value = [&](std::string_view allowed) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": field '", key, "': '",
                                                     std::string(value), "' is not one of ",
                                                     std::string(allowed)));
    };
    if (key == "role") {
      auto role = ParseRole(value);
      if (!role) return bad_value("root_cause, symptom, phase, progress, context");
      current.role = *role;
      has_role = true;
    } else if (key == "pattern") {
      if (value.empty()) {
        return absl::InvalidArgumentError(absl::StrCat(where, ": field 'pattern' is empty"));
      }
      current.pattern = std::string(value);
      // A pattern's errors point at its own line.
      current.origin = where;
    } else if (key == "class") {
      if (FindDiagnosisClass(value) == nullptr || value == "none") {
        return absl::InvalidArgumentError(absl::StrCat(
            where, ": field 'class': '", std::string(value), "' is not a diagnosis class"));
      }
      current.diagnosis_class = std::string(value);
    } else if (key == "fix") {
      auto fix = ParseFixKind(value);
      if (!fix || *fix == FixKind::kNone) {
        return bad_value("toolchain, env, jit_cache, launch_flags, restart, supervisor, report");
      }
      current.fix = *fix;
      has_fix = true;
    } else if (key == "summary") {
      current.summary = std::string(value);
    } else if (key == "within") {
      auto unit = ParseUnit(value);
      if (!unit) return bad_value("ninja_failed, traceback, worker_error");
      current.within = *unit;
    } else if (key == "phase") {
      auto phase = ParsePhase(value);
      if (!phase) return bad_value("loading, jit_compiling, capturing_graphs, ready");
      current.enters_phase = true;
      current.phase = *phase;
    } else if (key == "ends") {
      auto phase = ParsePhase(value);
      if (!phase || *phase == Phase::kReady) {
        return bad_value("loading, jit_compiling, capturing_graphs");
      }
      current.ends_phase = true;
      current.ended_phase = *phase;
    } else if (key == "failure_class") {
      if (FindDiagnosisClass(value) == nullptr || value == "none") {
        return absl::InvalidArgumentError(absl::StrCat(
            where, ": field 'failure_class': '", std::string(value), "' is not a diagnosis class"));
      }
      current.failure_class = std::string(value);
    } else if (key == "confidence") {
      auto confidence = ParseConfidence(value);
      if (!confidence) return bad_value("high, low");
      current.confidence = *confidence;
    } else if (key == "infer") {
      auto infer = ParseInference(value);
      if (!infer) return bad_value("cut, frame");
      current.infer = *infer;
    } else if (key == "cut_text") {
      const bool printable = std::all_of(value.begin(), value.end(), [](char c) {
        return static_cast<unsigned char>(c) >= 0x20 && static_cast<unsigned char>(c) < 0x7f;
      });
      if (value.empty() || !printable || value.size() > 200) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ": field 'cut_text' must be 1 to 200 printable ASCII characters"));
      }
      cut.text = std::string(value);
    } else if (key == "cut_min") {
      if (!absl::SimpleAtoi(::fleet::AsAbsl(value), &cut.min) || cut.min < 1) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ": field 'cut_min' must be a positive number"));
      }
    } else if (key == "after") {
      if (value.empty()) {
        return absl::InvalidArgumentError(absl::StrCat(where, ": field 'after' is empty"));
      }
      cut.after = std::string(value);
      current.origin = where;
    } else if (key == "cut_tail") {
      if (value.empty()) {
        return absl::InvalidArgumentError(absl::StrCat(where, ": field 'cut_tail' is empty"));
      }
      cut.tail = std::string(value);
      current.origin = where;
    } else if (key == "caller") {
      if (value.empty()) {
        return absl::InvalidArgumentError(absl::StrCat(where, ": field 'caller' is empty"));
      }
      current.caller = std::string(value);
    } else if (key == "all_matches" || key == "consequence") {
      if (value != "true" && value != "false") return bad_value("true, false");
      (key == "all_matches" ? current.all_matches : current.consequence) = value == "true";
    } else {
      return absl::InvalidArgumentError(absl::StrCat(where, ": unknown field '", key, "'"));
    }
    if (nl == text.size()) break;
  }
  absl::Status s = finish();
  if (!s.ok()) return s;
  if (out.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(std::string(origin), ": no signatures"));
  }
  return out;
}

}  // namespace fleet::diagnosis
