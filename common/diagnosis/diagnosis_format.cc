#include "common/diagnosis/diagnosis_format.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/base/json_writer.h"
#include "common/base/string_view.h"

namespace fleet::diagnosis {
namespace {

using ::fleet::AsAbsl;

void WriteFacts(const Facts& facts, JsonWriter& w) {
  w.BeginObject();
  for (const auto& [key, values] : facts.entries()) {
    w.Key(key);
    if (values.size() == 1) {
      w.String(values.front());
    } else {
      w.BeginArray();
      for (const std::string& v : values) w.String(v);
      w.EndArray();
    }
  }
  if (!facts.packages().empty()) {
    w.Key("packages");
    w.BeginObject();
    for (const auto& [name, version] : facts.packages()) {
      w.Key(name);
      w.String(version);
    }
    w.EndObject();
  }
  w.EndObject();
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

void AppendExplainJson(std::string_view file, const Diagnosis& d, std::string* out) {
  JsonWriter w(out);
  w.BeginObject();
  w.Key("file");
  w.String(file);
  w.Key("class");
  w.String(d.diagnosis_class);
  w.Key("root_cause_line");
  w.Int(d.root_cause_line);
  w.Key("summary");
  w.String(d.summary);
  w.Key("facts");
  WriteFacts(d.facts, w);
  w.Key("evidence");
  w.BeginArray();
  for (const EvidenceLine& l : d.evidence) {
    w.BeginObject();
    w.Key("line");
    w.Int(l.line);
    w.Key("text");
    w.String(l.text);
    w.EndObject();
  }
  w.EndArray();
  w.Key("symptoms");
  w.BeginArray();
  for (const SymptomHit& s : d.symptoms) {
    w.BeginObject();
    w.Key("line");
    w.Int(s.line);
    w.Key("class");
    w.String(s.diagnosis_class);
    w.EndObject();
  }
  w.EndArray();
  w.Key("toolchain_fix");
  w.Bool(d.toolchain_fix);
  w.EndObject();
}

std::string FormatExplainText(std::string_view file, const Diagnosis& d, bool color) {
  const Palette p = MakePalette(color);
  const bool failed = d.diagnosis_class != "none";
  std::string out = absl::StrCat(p.bold, SanitizeUtf8(file), p.reset, ": ",
                                 failed ? p.red : p.green, d.diagnosis_class, p.reset);
  if (d.provisional) absl::StrAppend(&out, " (provisional)");
  absl::StrAppend(&out, "\n  cause:     ", SanitizeUtf8(d.summary), "\n");
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
