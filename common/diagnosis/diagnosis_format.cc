#include "common/diagnosis/diagnosis_format.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/base/json_text.h"
#include "common/base/string_view.h"
#include "common/base/utf8.h"

namespace fleet::diagnosis {
namespace {

using ::fleet::AsAbsl;

Json FactsJson(const Facts& facts) {
  Json json = Json::object();
  for (const auto& [key, values] : facts.entries()) {
    json[key] = values.size() == 1 ? Json(values.front()) : Json(values);
  }
  if (!facts.packages().empty()) {
    Json packages = Json::object();
    for (const auto& [name, version] : facts.packages()) packages[name] = version;
    json["packages"] = std::move(packages);
  }
  return json;
}

struct Palette {
  const char* bold = "";
  const char* red = "";
  const char* green = "";
  const char* yellow = "";
  const char* dim = "";
  const char* reset = "";
};

Palette MakePalette(bool color) {
  if (!color) return {};
  return {"\x1b[1m", "\x1b[1;31m", "\x1b[1;32m", "\x1b[33m", "\x1b[2m", "\x1b[0m"};
}

}  // namespace

void AppendExplainJson(std::string_view file, const Diagnosis& d, std::string* out,
                       bool with_confidence) {
  Json json = Json::object();
  json["file"] = file;
  json["class"] = d.diagnosis_class;
  json["root_cause_line"] = d.root_cause_line;
  json["summary"] = d.summary;
  json["facts"] = FactsJson(d.facts);
  Json evidence = Json::array();
  for (const EvidenceLine& l : d.evidence) {
    Json line = Json::object();
    line["line"] = l.line;
    line["text"] = l.text;
    evidence.push_back(std::move(line));
  }
  json["evidence"] = std::move(evidence);
  Json symptoms = Json::array();
  for (const SymptomHit& s : d.symptoms) {
    Json symptom = Json::object();
    symptom["line"] = s.line;
    symptom["class"] = s.diagnosis_class;
    symptoms.push_back(std::move(symptom));
  }
  json["symptoms"] = std::move(symptoms);
  json["toolchain_fix"] = d.toolchain_fix;
  if (with_confidence) json["confidence"] = std::string(ConfidenceName(d.confidence));
  out->append(JsonText(std::move(json)));
}

std::string FormatExplainText(std::string_view file, const Diagnosis& d, bool color) {
  const Palette p = MakePalette(color);
  const bool failed = d.diagnosis_class != "none";
  std::string out = absl::StrCat(p.bold, SanitizeUtf8(file), p.reset, ": ",
                                 failed ? p.red : p.green, d.diagnosis_class, p.reset);
  if (d.provisional) absl::StrAppend(&out, " (provisional)");
  absl::StrAppend(&out, "\n  cause:     ", SanitizeUtf8(d.summary), "\n");
  if (failed && d.confidence == Confidence::kLow) {
    // Only the low one is shown: a high diagnosis reads as before.
    absl::StrAppend(&out, "  confidence: ", p.yellow, "low", p.reset,
                    " (inferred from a message's stem, a cut-off message or a traceback's "
                    "frames: reported, never fixed automatically)\n");
  }
  if (failed) {
    absl::StrAppend(&out, "  fix:       ", AsAbsl(FixKindDescription(d.fix)),
                    d.toolchain_fix ? " [toolchain fix]" : "", "\n");
  }
  if (d.root_cause_line > 0) {
    absl::StrAppend(&out, "  line:      ", d.root_cause_line);
    if (d.unit != UnitKind::kNone && !d.evidence.empty()) {
      int64_t first = 0, last = 0;
      for (const EvidenceLine& l : d.evidence) {
        if (l.line == 0) continue;
        if (first == 0) first = l.line;
        last = l.line;
      }
      absl::StrAppend(&out, " (in ", AsAbsl(UnitKindName(d.unit)), " ", first, "-", last, ")");
    }
    if (!d.signature_id.empty())
      absl::StrAppend(&out, p.dim, "  signature ", d.signature_id, p.reset);
    absl::StrAppend(&out, "\n");
  }
  if (!d.facts.empty()) {
    absl::StrAppend(&out, "  facts:\n");
    for (const auto& [key, values] : d.facts.entries()) {
      absl::StrAppend(&out, "    ", key, ": ");
      for (size_t i = 0; i < values.size(); ++i) {
        absl::StrAppend(&out, i ? ", " : "", SanitizeUtf8(values[i]));
      }
      absl::StrAppend(&out, "\n");
    }
    if (!d.facts.packages().empty()) {
      absl::StrAppend(&out, "    packages:");
      for (const auto& [name, version] : d.facts.packages()) {
        absl::StrAppend(&out, " ", SanitizeUtf8(name), "==", SanitizeUtf8(version));
      }
      absl::StrAppend(&out, "\n");
    }
  }
  if (!d.evidence.empty()) {
    int width = 1;
    for (const EvidenceLine& l : d.evidence) {
      width = std::max<int>(width, static_cast<int>(absl::StrCat(l.line).size()));
    }
    absl::StrAppend(&out, "  evidence:\n");
    for (const EvidenceLine& l : d.evidence) {
      if (l.line == 0) {
        absl::StrAppend(&out, "    ", std::string(width + 2, ' '), p.dim, l.text, p.reset, "\n");
        continue;
      }
      const bool mark = l.line == d.root_cause_line;
      absl::StrAppend(&out, mark ? p.yellow : "", mark ? "  > " : "    ",
                      absl::StrFormat("%*d", width, l.line), "  ", SanitizeUtf8(l.text),
                      mark ? p.reset : "", "\n");
    }
  }
  bool skipped_header = false;
  for (const SymptomHit& s : d.symptoms) {
    if (s.line == d.root_cause_line) continue;
    if (!skipped_header) {
      absl::StrAppend(&out, "  symptoms seen and skipped:\n");
      skipped_header = true;
    }
    absl::StrAppend(&out, "    line ", s.line, ": ", s.diagnosis_class, p.dim, " (", s.signature_id,
                    ")", p.reset, "\n");
  }
  absl::StrAppend(&out, "  log ends: ", d.lines, " lines, phase ", AsAbsl(PhaseName(d.phase)));
  if (!d.phase_detail.empty()) absl::StrAppend(&out, " (", SanitizeUtf8(d.phase_detail), ")");
  if (d.progress_total > 0) {
    absl::StrAppend(&out, ", last build step ", d.progress_step, "/", d.progress_total);
  }
  absl::StrAppend(&out, "\n");
  return out;
}

}  // namespace fleet::diagnosis
